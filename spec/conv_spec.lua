--- nn_ops: conv2d, max_pool2d, avg_pool2d, adaptive_avg_pool2d and their
-- backward ops against naive float64 references written here with plain
-- loops (the backward ones are the adjoints of the same loops), over many
-- parameter combinations, both float dtypes, non-contiguous inputs, the
-- threaded and blocked kernel paths and empty batches; each backward op also
-- against central differences of its forward; and every error message.
local tide = require "tide"
local nn = require "tide.nn_ops"
local T = require "tide.tensor"
local H = require "spec.helpers"

local floor, ceil = math.floor, math.ceil

-- -- data ---------------------------------------------------------------------------------

local function numel(shape)
  local n = 1
  for i = 1, #shape do n = n * shape[i] end
  return n
end

local seed = 11
local function values(shape, lo, hi)
  seed = seed + 13
  return H.values(numel(shape), lo or -1, hi or 1, seed)
end

--- A tensor of the flat values vals in `shape`.
local function tensor(vals, shape, dtype)
  if numel(shape) == 0 then return tide.zeros(shape, dtype or "float64") end
  return tide.tensor(H.nest(vals, shape), dtype or "float64")
end

local function flat(t) return H.flat(t:totable()) end

--- Asserts t has shape `shape` and the flat values `vals` within the tolerances.
local function close(t, vals, shape, rtol, atol, msg)
  if numel(shape) == 0 then
    assert.are.same(shape, t:shape())
    return
  end
  H.close(t, H.nest(vals, shape), rtol, atol, msg)
end

local tol = { float64 = { 1e-12, 1e-12 }, float32 = { 1e-5, 1e-5 } }

-- -- the references ----------------------------------------------------------------------------

--- PyTorch's output size.
local function out_size(n, k, s, p, d, ceil_mode)
  local num = n + 2 * p - d * (k - 1) - 1 + (ceil_mode and s - 1 or 0)
  local o = floor(num / s) + 1
  if ceil_mode and (o - 1) * s >= n + p then o = o - 1 end
  return o
end

local function pair(v, default)
  if v == nil then v = default end
  if type(v) == "number" then return v, v end
  return v[1], v[2]
end

--- Conv geometry from shapes and options: a table the loops read.
local function conv_geom(xs, ws, opts)
  local g = { n = xs[1], c = xs[2], h = xs[3], w = xs[4], o = ws[1], cg = ws[2], kh = ws[3], kw = ws[4] }
  g.sh, g.sw = pair(opts.stride, 1)
  g.ph, g.pw = pair(opts.padding, 0)
  g.dh, g.dw = pair(opts.dilation, 1)
  g.groups = opts.groups or 1
  g.oh, g.ow = out_size(g.h, g.kh, g.sh, g.ph, g.dh), out_size(g.w, g.kw, g.sw, g.pw, g.dw)
  return g
end

--- Calls f(xi, wi, yi) (1-based flat indices) for every product of the convolution.
local function conv_loops(g, f)
  local og = g.o / g.groups
  for n = 0, g.n - 1 do
    for o = 0, g.o - 1 do
      local grp = floor(o / og)
      for oy = 0, g.oh - 1 do
        for ox = 0, g.ow - 1 do
          local yi = ((n * g.o + o) * g.oh + oy) * g.ow + ox + 1
          for cg = 0, g.cg - 1 do
            local c = grp * g.cg + cg
            for ki = 0, g.kh - 1 do
              local iy = oy * g.sh - g.ph + ki * g.dh
              if iy >= 0 and iy < g.h then
                for kj = 0, g.kw - 1 do
                  local ix = ox * g.sw - g.pw + kj * g.dw
                  if ix >= 0 and ix < g.w then
                    f(((n * g.c + c) * g.h + iy) * g.w + ix + 1, ((o * g.cg + cg) * g.kh + ki) * g.kw + kj + 1, yi)
                  end
                end
              end
            end
          end
        end
      end
    end
  end
end

local function zeros(n)
  local r = {}
  for i = 1, n do r[i] = 0 end
  return r
end

local function ref_conv(x, w, b, g)
  local y = zeros(g.n * g.o * g.oh * g.ow)
  if b then
    for i = 1, #y do y[i] = b[floor((i - 1) / (g.oh * g.ow)) % g.o + 1] end
  end
  conv_loops(g, function(xi, wi, yi) y[yi] = y[yi] + x[xi] * w[wi] end)
  return y, { g.n, g.o, g.oh, g.ow }
end

local function ref_conv_grad_input(gy, w, g)
  local gx = zeros(g.n * g.c * g.h * g.w)
  conv_loops(g, function(xi, wi, yi) gx[xi] = gx[xi] + w[wi] * gy[yi] end)
  return gx
end

local function ref_conv_grad_weight(gy, x, g)
  local gw = zeros(g.o * g.cg * g.kh * g.kw)
  conv_loops(g, function(xi, wi, yi) gw[wi] = gw[wi] + x[xi] * gy[yi] end)
  return gw
end

--- Pool geometry: kernel, stride (default kernel), padding, dilation, ceil_mode.
local function pool_geom(xs, kernel, opts)
  local g = { n = xs[1], c = xs[2], h = xs[3], w = xs[4] }
  g.kh, g.kw = pair(kernel)
  g.sh, g.sw = pair(opts.stride, { g.kh, g.kw })
  g.ph, g.pw = pair(opts.padding, 0)
  g.dh, g.dw = pair(opts.dilation, 1)
  g.ceil = opts.ceil_mode or false
  g.oh, g.ow = out_size(g.h, g.kh, g.sh, g.ph, g.dh, g.ceil), out_size(g.w, g.kw, g.sw, g.pw, g.dw, g.ceil)
  return g
end

--- Max pooling as PyTorch's CPU kernel does it: taps in row-major order, a
-- larger value or a NaN takes over; the first valid tap by default. Indices
-- 1-based within the plane, 0 for a window without input elements.
local function ref_max_pool(x, g)
  local y, idx = {}, {}
  for plane = 0, g.n * g.c - 1 do
    local base = plane * g.h * g.w
    for oy = 0, g.oh - 1 do
      for ox = 0, g.ow - 1 do
        local best, bi = -math.huge, nil
        for ki = 0, g.kh - 1 do
          local iy = oy * g.sh - g.ph + ki * g.dh
          for kj = 0, g.kw - 1 do
            local ix = ox * g.sw - g.pw + kj * g.dw
            if iy >= 0 and iy < g.h and ix >= 0 and ix < g.w then
              local v = x[base + iy * g.w + ix + 1]
              bi = bi or iy * g.w + ix
              if v > best or v ~= v then best, bi = v, iy * g.w + ix end
            end
          end
        end
        y[#y + 1] = best
        idx[#idx + 1] = bi and bi + 1 or 0
      end
    end
  end
  return y, idx
end

local function ref_max_pool_grad(gy, idx, g)
  local gx = zeros(g.n * g.c * g.h * g.w)
  local per = g.oh * g.ow
  for i = 1, #gy do
    if idx[i] > 0 then
      local k = floor((i - 1) / per) * g.h * g.w + idx[i]
      gx[k] = gx[k] + gy[i]
    end
  end
  return gx
end

--- Calls f(xi, yi, divisor) for every input element of every avg_pool2d window.
local function avg_loops(g, opts, f)
  local include = opts.count_include_pad ~= false
  for plane = 0, g.n * g.c - 1 do
    for oy = 0, g.oh - 1 do
      for ox = 0, g.ow - 1 do
        local y0, x0 = oy * g.sh - g.ph, ox * g.sw - g.pw
        local y1, x1 = math.min(y0 + g.kh, g.h + g.ph), math.min(x0 + g.kw, g.w + g.pw)
        local pool = (y1 - y0) * (x1 - x0)
        local a0, b0, a1, b1 = math.max(y0, 0), math.max(x0, 0), math.min(y1, g.h), math.min(x1, g.w)
        local div = opts.divisor_override or (include and pool or (a1 - a0) * (b1 - b0))
        local yi = (plane * g.oh + oy) * g.ow + ox + 1
        for iy = a0, a1 - 1 do
          for ix = b0, b1 - 1 do f(plane * g.h * g.w + iy * g.w + ix + 1, yi, div) end
        end
      end
    end
  end
end

local function ref_avg_pool(x, g, opts)
  local y = zeros(g.n * g.c * g.oh * g.ow)
  avg_loops(g, opts, function(xi, yi, div) y[yi] = y[yi] + x[xi] / div end)
  return y
end

local function ref_avg_pool_grad(gy, g, opts)
  local gx = zeros(g.n * g.c * g.h * g.w)
  avg_loops(g, opts, function(xi, yi, div) gx[xi] = gx[xi] + gy[yi] / div end)
  return gx
end

--- Calls f(xi, yi, count) for every input element of every adaptive window.
local function adaptive_loops(xs, oh, ow, f)
  local hh, ww = xs[3], xs[4]
  for plane = 0, xs[1] * xs[2] - 1 do
    for oy = 0, oh - 1 do
      local y0, y1 = floor(oy * hh / oh), ceil((oy + 1) * hh / oh)
      for ox = 0, ow - 1 do
        local x0, x1 = floor(ox * ww / ow), ceil((ox + 1) * ww / ow)
        for iy = y0, y1 - 1 do
          for ix = x0, x1 - 1 do
            f(plane * hh * ww + iy * ww + ix + 1, (plane * oh + oy) * ow + ox + 1, (y1 - y0) * (x1 - x0))
          end
        end
      end
    end
  end
end

--- Central differences of loss(x) = sum(f(x) * r) with respect to every element of x (float64).
local function numeric_grad(f, xv, xshape, r)
  local rt = tensor(r, f(tensor(xv, xshape)):shape())
  local function loss(v) return f(tensor(v, xshape)):mul(rt):sum():item() end
  local g, eps = {}, 1e-6
  for i = 1, #xv do
    local keep = xv[i]
    xv[i] = keep + eps
    local lp = loss(xv)
    xv[i] = keep - eps
    local lm = loss(xv)
    xv[i] = keep
    g[i] = (lp - lm) / (2 * eps)
  end
  return g
end

local sync = H.sync

-- -- conv2d -------------------------------------------------------------------------------------

local conv_cases = {
  { "3x3, padding 1, bias", { 2, 3, 6, 5 }, { 4, 3, 3, 3 }, { padding = 1 }, true },
  { "stride 2, no padding", { 2, 2, 7, 7 }, { 3, 2, 3, 3 }, { stride = 2 } },
  { "non-square kernel, stride and padding", { 1, 2, 6, 8 }, { 3, 2, 2, 3 }, { stride = { 2, 1 }, padding = { 1, 0 } } },
  { "dilation", { 1, 2, 9, 8 }, { 2, 2, 3, 2 }, { dilation = { 2, 3 }, padding = { 2, 1 } }, true },
  { "groups 2", { 2, 4, 5, 5 }, { 6, 2, 3, 3 }, { groups = 2, padding = 1 }, true },
  { "depthwise", { 1, 3, 5, 6 }, { 3, 1, 3, 3 }, { groups = 3 } },
  { "1x1", { 2, 5, 4, 3 }, { 3, 5, 1, 1 }, {}, true },
  { "1x1, groups and stride 2", { 1, 4, 5, 5 }, { 4, 2, 1, 1 }, { groups = 2, stride = 2 } },
  { "batch 1, one channel, padding beyond the kernel", { 1, 1, 5, 5 }, { 1, 1, 3, 3 }, { padding = 2 } },
  { "kernel as large as the padded input", { 1, 2, 3, 4 }, { 2, 2, 5, 6 }, { padding = 1 } },
  { "stride larger than the kernel", { 1, 1, 9, 9 }, { 2, 1, 2, 2 }, { stride = 4, padding = 1 } },
  { "stride, dilation, groups and padding at once", { 2, 6, 8, 7 }, { 4, 3, 2, 3 },
    { stride = { 2, 3 }, dilation = { 3, 1 }, padding = { 1, 2 }, groups = 2 }, true },
  -- more than 32 taps per output channel: the weight gradient is a GEMM, not small_gw's dot products
  { "groups 2, 36 taps per channel", { 2, 8, 6, 5 }, { 4, 4, 3, 3 }, { groups = 2, padding = 1, stride = { 1, 2 } }, true },
  { "36 taps per channel, non-square", { 1, 3, 7, 6 }, { 5, 3, 3, 4 }, { padding = { 1, 2 } } },
}

describe("conv2d", function()
  it("computes a hand-checked convolution", function()
    local x = tide.arange(1, 17, 1, "float32"):reshape(1, 1, 4, 4)
    local w = tide.tensor { { { { 1, 0 }, { 0, -1 } } } }
    H.equal(nn.conv2d(x, w), { { { { -5, -5, -5 }, { -5, -5, -5 }, { -5, -5, -5 } } } })
    H.equal(nn.conv2d(x, w, tide.tensor { 10 }, { stride = 2 }), { { { { 5, 5 }, { 5, 5 } } } })
    H.equal(nn.conv2d(x, tide.ones(1, 1, 3, 3), nil, { padding = "same" }),
      { { { { 14, 24, 30, 22 }, { 33, 54, 63, 45 }, { 57, 90, 99, 69 }, { 46, 72, 78, 54 } } } })
    assert.are.same({ 1, 1, 3, 3 }, nn.conv2d(x, w, nil, { padding = "valid" }):shape())
  end)

  for _, case in ipairs(conv_cases) do
    local name, xs, ws, opts, with_bias = case[1], case[2], case[3], case[4], case[5]
    for _, dtype in ipairs { "float64", "float32" } do
      it("matches the reference and its adjoints: " .. name .. ", " .. dtype, function()
        local g = conv_geom(xs, ws, opts)
        local xv, wv = values(xs), values(ws)
        local bv = with_bias and values({ ws[1] }) or nil
        local x, w = tensor(xv, xs, dtype), tensor(wv, ws, dtype)
        local b = bv and tensor(bv, { ws[1] }, dtype)
        local yv, ys = ref_conv(xv, wv, bv, g)
        local y = nn.conv2d(x, w, b, opts)
        assert.are.equal(dtype, y:dtype())
        local t = tol[dtype]
        close(y, yv, ys, t[1], t[2] * g.cg * g.kh * g.kw, name)
        local gyv = values(ys)
        local gy = tensor(gyv, ys, dtype)
        close(nn.conv2d_backward_input(gy, w, xs, opts), ref_conv_grad_input(gyv, wv, g), xs, t[1], t[2] * 32)
        close(nn.conv2d_backward_weight(gy, x, ws, opts), ref_conv_grad_weight(gyv, xv, g), ws, t[1],
          t[2] * g.n * g.oh * g.ow)
      end)
    end
  end

  it("backward ops match central differences of the forward", function()
    for _, case in ipairs { conv_cases[1], conv_cases[4], conv_cases[5], conv_cases[12] } do
      local xs, ws, opts = case[2], { case[3][1], case[3][2], case[3][3], case[3][4] }, case[4]
      if numel(xs) > 150 then xs = { 1, xs[2], xs[3], xs[4] } end
      local g = conv_geom(xs, ws, opts)
      local xv, wv = values(xs), values(ws)
      local x, w = tensor(xv, xs), tensor(wv, ws)
      local r = values({ g.n, g.o, g.oh, g.ow })
      local gy = tensor(r, { g.n, g.o, g.oh, g.ow })
      local num_x = numeric_grad(function(t) return nn.conv2d(t, w, nil, opts) end, xv, xs, r)
      close(nn.conv2d_backward_input(gy, w, xs, opts), num_x, xs, 1e-6, 1e-7, case[1] .. ": input")
      local num_w = numeric_grad(function(t) return nn.conv2d(x, t, nil, opts) end, wv, ws, r)
      close(nn.conv2d_backward_weight(gy, x, ws, opts), num_w, ws, 1e-6, 1e-7, case[1] .. ": weight")
      local num_b = numeric_grad(function(t) return nn.conv2d(x, w, t, opts) end, values({ g.o }), { g.o }, r)
      close(nn.conv2d_backward_bias(gy), num_b, { g.o }, 1e-6, 1e-7, case[1] .. ": bias")
    end
  end)

  it("reads non-contiguous inputs and writes non-contiguous results", function()
    local xs, ws, opts = { 2, 3, 6, 5 }, { 4, 3, 3, 3 }, { padding = 1, stride = { 1, 2 } }
    local g = conv_geom(xs, ws, opts)
    local xv, wv, bv = values(xs), values(ws), values({ 4 })
    local yv, ys = ref_conv(xv, wv, bv, g)
    for _, dtype in ipairs { "float64", "float32" } do
      local x, w, b = tensor(xv, xs, dtype), tensor(wv, ws, dtype), tensor(bv, { 4 }, dtype)
      local t = tol[dtype]
      local layouts = {
        channels_last = x:permute(1, 3, 4, 2):clone():permute(1, 4, 2, 3),
        transposed = x:transpose(3, 4):clone():transpose(3, 4),
        strided = H.layouts(x).strided,
        batch_reversed = x:flip(1):clone():flip(1),
      }
      for name, xl in pairs(layouts) do
        assert.is_false(xl:is_contiguous() and name ~= "batch_reversed")
        local wl = w:transpose(1, 2):clone():transpose(1, 2)
        local bl = H.layouts(b).strided
        close(nn.conv2d(xl, wl, bl, opts), yv, ys, t[1], t[2] * 27, name)
        local gyv = values(ys)
        local gyl = tensor(gyv, ys, dtype):transpose(2, 4):clone():transpose(2, 4)
        close(nn.conv2d_backward_input(gyl, wl, xs, opts), ref_conv_grad_input(gyv, wv, g), xs, t[1], t[2] * 32, name)
        close(nn.conv2d_backward_weight(gyl, xl, ws, opts), ref_conv_grad_weight(gyv, xv, g), ws, t[1], t[2] * 64, name)
      end
      -- into a given non-contiguous tensor (the C API's `out`)
      local out = tide.zeros({ ys[1], ys[3], ys[4], ys[2] }, dtype):permute(1, 4, 2, 3)
      local p = T.new_params()
      for i, v in ipairs { 1, 2, 1, 1, 1, 1, 1 } do p.ints[i - 1] = v end
      p.n_ints = 7
      T.ins_set(0, x); T.ins_set(1, w); T.ins_set(2, b)
      T.run(T.op_ids.conv2d, 3, p, out)
      close(out, yv, ys, t[1], t[2] * 27, "out")
    end
  end)

  it("takes the 1x1 fast path and the im2col path to the same result", function()
    local xs, ws = { 2, 6, 4, 5 }, { 4, 3, 1, 1 }
    local g = conv_geom(xs, ws, { groups = 2 })
    local xv, wv = values(xs), values(ws)
    local x, w = tensor(xv, xs), tensor(wv, ws)
    local yv, ys = ref_conv(xv, wv, nil, g)
    local xt = x:transpose(3, 4):clone():transpose(3, 4)   -- planes not contiguous: im2col
    local expanded = tensor(values({ 2, 1, 4, 5 }), { 2, 1, 4, 5 }):expand(2, 6, 4, 5)   -- channel stride 0
    close(nn.conv2d(x, w, nil, { groups = 2 }), yv, ys, 1e-12, 1e-12)
    close(nn.conv2d(xt, w, nil, { groups = 2 }), yv, ys, 1e-12, 1e-12)
    local ev = flat(expanded)
    close(nn.conv2d(expanded, w, nil, { groups = 2 }), (ref_conv(ev, wv, nil, g)), ys, 1e-12, 1e-12)
    local gyv = values(ys)
    local gy = tensor(gyv, ys)
    close(nn.conv2d_backward_input(gy, w, xs, { groups = 2 }), ref_conv_grad_input(gyv, wv, g), xs, 1e-12, 1e-12)
    close(nn.conv2d_backward_weight(gy, xt, ws, { groups = 2 }), ref_conv_grad_weight(gyv, xv, g), ws, 1e-12, 1e-12)
    close(nn.conv2d_backward_weight(gy, x, ws, { groups = 2 }), ref_conv_grad_weight(gyv, xv, g), ws, 1e-12, 1e-12)
  end)

  it("splits large images into blocks and batches across threads", function()
    -- 16 channels x 3x3 taps x 32x32 positions of float64 is more im2col than one block
    local cases = {
      { { 1, 16, 32, 32 }, { 4, 16, 3, 3 }, { padding = 1 } },
      { { 8, 8, 16, 16 }, { 16, 8, 3, 3 }, { padding = 1 } },      -- enough work for partial sums per thread
      { { 1, 4, 40, 33 }, { 6, 2, 3, 3 }, { padding = 1, groups = 2, stride = { 1, 2 } } },
      { { 1, 3, 1, 300 }, { 2, 3, 1, 3 }, { padding = { 0, 1 } } },   -- blocks that start inside a row
    }
    for _, case in ipairs(cases) do
      local xs, ws, opts = case[1], case[2], case[3]
      local g = conv_geom(xs, ws, opts)
      local xv, wv = values(xs), values(ws)
      local x, w = tensor(xv, xs), tensor(wv, ws)
      local yv, ys = ref_conv(xv, wv, nil, g)
      local gyv = values(ys)
      local gy = tensor(gyv, ys)
      local y, gx, gw = nn.conv2d(x, w, nil, opts), nn.conv2d_backward_input(gy, w, xs, opts),
        nn.conv2d_backward_weight(gy, x, ws, opts)
      close(y, yv, ys, 1e-12, 1e-12)
      close(gx, ref_conv_grad_input(gyv, wv, g), xs, 1e-12, 1e-12)
      close(gw, ref_conv_grad_weight(gyv, xv, g), ws, 1e-12, 1e-11)
      -- one thread gives the same result, up to the order of partial sums: the
      -- weight gradient's own, and OpenBLAS's, whose small-matrix kernels (in
      -- its AVX-512 sets) sum in another order than its threaded driver
      local threads = tide.get_num_threads()
      tide.set_num_threads(1)
      local ok, err = pcall(function()
        H.close(nn.conv2d(x, w, nil, opts), y, 1e-14, 1e-14)
        H.close(nn.conv2d_backward_input(gy, w, xs, opts), gx, 1e-14, 1e-14)
        H.close(nn.conv2d_backward_weight(gy, x, ws, opts), gw, 1e-13, 1e-13)
      end)
      tide.set_num_threads(threads)
      assert(ok, err)
    end
    -- and float32 through the same blocks
    local xs, ws = { 1, 16, 48, 48 }, { 4, 16, 3, 3 }
    local g = conv_geom(xs, ws, { padding = 1 })
    local xv, wv = values(xs), values(ws)
    local yv, ys = ref_conv(xv, wv, nil, g)
    close(nn.conv2d(tensor(xv, xs, "float32"), tensor(wv, ws, "float32"), nil, { padding = 1 }), yv, ys, 1e-5, 1e-4)
  end)

  it("runs a wide layer's per-image GEMMs on OpenBLAS's threads, to the reference", function()
    -- 64 x 196 x 288 multiply-adds per image: images one after the other, each GEMM threaded
    local xs, ws, opts = { 3, 32, 14, 14 }, { 64, 32, 3, 3 }, { padding = 1 }
    local g = conv_geom(xs, ws, opts)
    local xv, wv = values(xs), values(ws)
    local yv, ys = ref_conv(xv, wv, nil, g)
    local gyv = values(ys)
    for _, dtype in ipairs { "float64", "float32" } do
      local x, w, gy = tensor(xv, xs, dtype), tensor(wv, ws, dtype), tensor(gyv, ys, dtype)
      local rt, at = dtype == "float64" and 1e-12 or 1e-5, dtype == "float64" and 1e-11 or 1e-3
      close(nn.conv2d(x, w, nil, opts), yv, ys, rt, at, dtype)
      close(nn.conv2d_backward_input(gy, w, xs, opts), ref_conv_grad_input(gyv, wv, g), xs, rt, at, dtype)
      close(nn.conv2d_backward_weight(gy, x, ws, opts), ref_conv_grad_weight(gyv, xv, g), ws, rt, 4 * at, dtype)
    end
  end)

  it("computes float16 inputs in float32", function()
    local xs, ws = { 1, 2, 5, 5 }, { 3, 2, 3, 3 }
    local g = conv_geom(xs, ws, { padding = 1 })
    local x, w = tensor(values(xs), xs):to("float16"), tensor(values(ws), ws):to("float16")
    local yv, ys = ref_conv(flat(x), flat(w), nil, g)
    local y = nn.conv2d(x, w, nil, { padding = 1 })
    assert.are.equal("float16", y:dtype())
    close(y, yv, ys, 2e-3, 5e-3)
  end)

  it("handles an empty batch", function()
    local x, w, b = tide.zeros(0, 3, 5, 5), tide.ones(4, 3, 3, 3), tide.ones(4)
    assert.are.same({ 0, 4, 3, 3 }, nn.conv2d(x, w, b):shape())
    assert.are.same({ 0, 3, 5, 5 }, nn.conv2d_backward_input(tide.zeros(0, 4, 3, 3), w, x):shape())
    H.equal(nn.conv2d_backward_weight(tide.zeros(0, 4, 3, 3), x, w), tide.zeros(4, 3, 3, 3))
    H.equal(nn.conv2d_backward_bias(tide.zeros(0, 4, 3, 3)), { 0, 0, 0, 0 })
  end)

  it("reports bad shapes, dtypes and parameters", function()
    local x, w = tide.zeros(1, 3, 5, 5), tide.zeros(2, 3, 3, 3)
    local function e(f, msg) assert.has_error(f, msg) end
    e(function() nn.conv2d(tide.zeros(1, 3, 5), w) end, "conv2d: expects a 4-d input [N,C,H,W], got shape [1,3,5]")
    e(function() nn.conv2d(x, tide.zeros(2, 3, 3)) end, "conv2d: expects a 4-d weight [O,C/groups,kH,kW], got shape [2,3,3]")
    e(function() nn.conv2d(x:long(), w:long()) end, "conv2d: input must be a floating-point tensor, got int64")
    e(function() nn.conv2d(x, w:double()) end, "conv2d: weight has dtype float64 but input has dtype float32")
    e(function() nn.conv2d(x, w, tide.zeros(2, "float64")) end, "conv2d: bias has dtype float64 but input has dtype float32")
    e(function() nn.conv2d(x, w, tide.zeros(3)) end,
      "conv2d: expects a 1-d bias of 2 elements (the weight's output channels), got shape [3]")
    e(function() nn.conv2d(x, w, nil, { stride = { 0, 1 } }) end, "conv2d: stride must be positive, got (0, 1)")
    e(function() nn.conv2d(x, w, nil, { padding = { -1, 0 } }) end, "conv2d: padding must be non-negative, got (-1, 0)")
    e(function() nn.conv2d(x, w, nil, { dilation = { 1, 0 } }) end, "conv2d: dilation must be positive, got (1, 0)")
    e(function() nn.conv2d(x, w, nil, { groups = 0 }) end, "conv2d: groups must be positive, got 0")
    e(function() nn.conv2d(x, tide.zeros(2, 1, 3, 3), nil, { groups = 2 }) end,
      "conv2d: input channels 3 are not divisible by groups 2")
    e(function() nn.conv2d(tide.zeros(1, 4, 5, 5), tide.zeros(3, 2, 3, 3), nil, { groups = 2 }) end,
      "conv2d: output channels 3 (weight of shape [3,2,3,3]) are not divisible by groups 2")
    e(function() nn.conv2d(tide.zeros(1, 4, 5, 5), w) end,
      "conv2d: input of shape [1,4,5,5] has 4 channels but weight of shape [2,3,3,3] with groups 1 expects 3")
    e(function() nn.conv2d(tide.zeros(1, 1, 4, 4), tide.zeros(1, 1, 5, 5)) end,
      "conv2d: kernel 5x5 (dilation 1x1) is larger than the padded input 4x4 (input of shape [1,1,4,4], padding 0x0)")
    e(function() nn.conv2d(tide.zeros(1, 1, 4, 4), tide.zeros(1, 1, 3, 3), nil, { dilation = { 1, 3 }, padding = { 0, 1 } }) end,
      "conv2d: kernel 3x3 (dilation 1x3) is larger than the padded input 4x6 (input of shape [1,1,4,4], padding 0x1)")
    -- the Lua side's own checks
    e(function() nn.conv2d(x, nil) end, "conv2d: argument 2 (weight) must be a tensor, got nil")
    e(function() nn.conv2d(x, w, 1) end, "conv2d: argument 3 (bias) must be a tensor, got number")
    e(function() nn.conv2d(x, w, nil, { stride = "2" }) end, "conv2d: stride must be a number or a table {h, w}, got string")
    e(function() nn.conv2d(x, w, nil, { stride = { 1, 2, 3 } }) end,
      "conv2d: stride must be a number or a table {h, w}, got a table of 3")
    e(function() nn.conv2d(x, w, nil, { padding = 1.5 }) end, "conv2d: padding must be integers, got {1.5, 1.5}")
    e(function() nn.conv2d(x, w, nil, { groups = 1.5 }) end, "conv2d: groups must be an integer, got 1.5")
    e(function() nn.conv2d(x, w, nil, { strides = 2 }) end, "conv2d: unknown option 'strides'")
    e(function() nn.conv2d(x, w, nil, 2) end, "conv2d: options must be a table, got number")
    e(function() nn.conv2d(x, w, nil, { padding = "same", stride = 2 }) end, "conv2d: padding='same' needs stride 1, got {2, 2}")
    e(function() nn.conv2d(x, tide.zeros(2, 3, 2, 2), nil, { padding = "same" }) end,
      "conv2d: padding='same' with kernel 2x2 and dilation 1x1 would pad one side more than the other, which is not supported")
    -- the C API's checks that Lua cannot reach
    local p = T.new_params()   -- the binding's one params block: no tensors made while it is set
    p.n_ints = 3
    T.ins_set(0, x); T.ins_set(1, w)
    e(function() T.run(T.op_ids.conv2d, 2, p, nil) end,
      "conv2d: takes 7 ints (stride h, w, padding h, w, dilation h, w, groups), got 3")
    local b = tide.zeros(2)
    T.ins_set(2, b); T.ins_set(3, x)
    e(function() T.run(T.op_ids.conv2d, 4, nil, nil) end,
      "conv2d: takes 2 or 3 tensor inputs (input, weight, bias), 4 given")
    p = T.new_params()
    T.ins_set(0, x); T.ins_set(1, w)
    for i = 0, 6 do p.ints[i] = 1 end
    p.n_ints, p.dtype = 7, 1
    e(function() T.run(T.op_ids.conv2d, 2, p, nil) end, "conv2d: the result has the dtype of input (float32), not float64")
  end)

  it("reports bad shapes for its backward ops", function()
    local w, x = tide.zeros(2, 3, 3, 3), tide.zeros(1, 3, 6, 6)
    local function e(f, msg) assert.has_error(f, msg) end
    e(function() nn.conv2d_backward_input(tide.zeros(1, 2, 3, 3), w, x) end,
      "conv2d_backward_input: grad_output of shape [1,2,3,3] does not match conv2d's result shape [1,2,4,4] for an input of shape [1,3,6,6]")
    e(function() nn.conv2d_backward_input(tide.zeros(1, 2, 4, 4), w, { 1, -3, 6, 6 }) end,
      "conv2d_backward_input: input sizes must be non-negative, got [1,-3,6,6]")
    e(function() nn.conv2d_backward_input(tide.zeros(1, 2, 4, 4), w, { 1, 4, 6, 6 }) end,
      "conv2d_backward_input: input of shape [1,4,6,6] has 4 channels but weight of shape [2,3,3,3] with groups 1 expects 3")
    e(function() nn.conv2d_backward_input(tide.zeros(1, 2, 4, 4):int(), w:int(), x) end,
      "conv2d_backward_input: grad_output must be a floating-point tensor, got int32")
    e(function() nn.conv2d_backward_input(tide.zeros(1, 2, 4, 4), w:double(), x) end,
      "conv2d_backward_input: weight has dtype float64 but grad_output has dtype float32")
    e(function() nn.conv2d_backward_input(tide.zeros(1, 2, 4, 4), w, { 1, 3, 6 }) end,
      "conv2d_backward_input: input_size must be a table of 4 sizes or a 4-d tensor, got a table of 3")
    e(function() nn.conv2d_backward_input(tide.zeros(2, 4, 4), w, x) end,
      "conv2d_backward_input: expects a 4-d grad_output [N,O,oH,oW], got shape [2,4,4]")
    e(function() nn.conv2d_backward_weight(tide.zeros(1, 2, 4, 5), x, w) end,
      "conv2d_backward_weight: grad_output of shape [1,2,4,5] does not match conv2d's result shape [1,2,4,4] for an input of shape [1,3,6,6]")
    e(function() nn.conv2d_backward_weight(tide.zeros(1, 2, 4, 4), x, { 2, 3, -1, 3 }) end,
      "conv2d_backward_weight: weight sizes must be non-negative, got [2,3,-1,3]")
    e(function() nn.conv2d_backward_weight(tide.zeros(1, 2, 4, 4), x:double(), w) end,
      "conv2d_backward_weight: input has dtype float64 but grad_output has dtype float32")
    e(function() nn.conv2d_backward_weight(tide.zeros(1, 2, 4, 4), tide.zeros(3, 6, 6), w) end,
      "conv2d_backward_weight: expects a 4-d input [N,C,H,W], got shape [3,6,6]")
    e(function() nn.conv2d_backward_weight(tide.zeros(1, 2, 4, 4), x, w, { groups = 2 }) end,
      "conv2d_backward_weight: input channels 3 are not divisible by groups 2")
    local gy = tide.zeros(1, 2, 4, 4)
    local p = T.new_params()   -- the binding's one params block: made after the tensors
    p.n_ints = 7
    T.ins_set(0, gy); T.ins_set(1, x)
    e(function() T.run(T.op_ids.conv2d_backward_weight, 2, p, nil) end,
      "conv2d_backward_weight: takes 11 ints (stride h, w, padding h, w, dilation h, w, groups, then the weight's sizes O, C/groups, kH, kW), got 7")
  end)
end)

-- -- pooling ------------------------------------------------------------------------------------

local max_cases = {
  { "2x2", { 2, 3, 6, 6 }, 2, {} },
  { "3x3 stride 2 padding 1", { 1, 2, 7, 6 }, 3, { stride = 2, padding = 1 } },
  { "overlapping windows", { 1, 2, 5, 5 }, 3, { stride = 1 } },
  { "non-square, ceil_mode", { 2, 1, 7, 8 }, { 2, 3 }, { stride = { 2, 2 }, ceil_mode = true } },
  { "ceil_mode drops a window that starts in the padding", { 1, 1, 5, 5 }, 2, { stride = 2, padding = 1, ceil_mode = true } },
  { "dilation", { 1, 2, 9, 8 }, 3, { dilation = { 2, 3 }, stride = 1, padding = 1 } },
  { "dilation, padding and ceil_mode", { 1, 1, 10, 9 }, { 3, 2 }, { dilation = 2, stride = 3, padding = 1, ceil_mode = true } },
  { "kernel the size of the input", { 2, 2, 3, 4 }, { 3, 4 }, {} },
}

describe("max_pool2d", function()
  it("computes hand-checked maxima and 1-based indices", function()
    local x = tide.tensor { { { { 1, 5, 2, 0 }, { 3, 4, 8, 1 }, { 0, 0, 0, 0 }, { 9, 0, 0, 7 } } } }
    local y, idx = nn.max_pool2d(x, 2, { return_indices = true })
    H.equal(y, { { { { 5, 8 }, { 9, 7 } } } })
    H.equal(idx, { { { { 2, 7 }, { 13, 16 } } } })
    assert.are.equal("int64", idx:dtype())
    H.equal(nn.max_pool2d_backward(tide.tensor { { { { 1, 2 }, { 3, 4 } } } }, idx, x),
      { { { { 0, 1, 0, 0 }, { 0, 0, 2, 0 }, { 0, 0, 0, 0 }, { 3, 0, 0, 4 } } } })
    assert.is_true(tide.is_tensor(nn.max_pool2d(x, 2)))   -- no indices unless asked
    assert.are.equal(1, select("#", nn.max_pool2d(x, 2)))
  end)

  for _, case in ipairs(max_cases) do
    local name, xs, k, opts = case[1], case[2], case[3], case[4]
    for _, dtype in ipairs { "float64", "float32" } do
      it("matches the reference and its adjoint: " .. name .. ", " .. dtype, function()
        local g = pool_geom(xs, k, opts)
        local xv = values(xs)
        local x = tensor(xv, xs, dtype)
        local o = { return_indices = true }
        for key, v in pairs(opts) do o[key] = v end
        local y, idx = nn.max_pool2d(x, k, o)
        local yv, iv = ref_max_pool(flat(x), g)
        local ys = { g.n, g.c, g.oh, g.ow }
        close(y, yv, ys, 0, 0, name)
        close(idx, iv, ys, 0, 0, name)
        local gyv = values(ys)
        close(nn.max_pool2d_backward(tensor(gyv, ys, dtype), idx, xs), ref_max_pool_grad(gyv, iv, g), xs,
          tol[dtype][1], tol[dtype][2])
      end)
    end
  end

  it("breaks ties to the first tap, propagates NaN, and indexes all -inf windows at their first tap", function()
    local nan, inf = 0 / 0, math.huge
    for _, dtype in ipairs { "float64", "float32" } do
      local x = tide.tensor({ { { { 2, 2, 1, nan }, { 1, 2, nan, 5 }, { -inf, -inf, 3, 3 }, { -inf, -inf, 3, 3 } } } }, dtype)
      -- contiguous rows take the vectorised 2x2 kernel, transposed ones the general one
      for _, xl in ipairs { x, x:transpose(3, 4):clone():transpose(3, 4) } do
        local y, idx = nn.max_pool2d(xl, 2, { return_indices = true })
        local yt = flat(y)
        assert.are.same({ 2, -inf, 3 }, { yt[1], yt[3], yt[4] })
        assert.is_true(yt[2] ~= yt[2])
        H.equal(idx, { { { { 1, 7 }, { 9, 11 } } } })   -- the last NaN wins, as in PyTorch
      end
      -- -0 and 0 are equal: the first one stays, sign included
      local z = tide.tensor({ { { { -0.0, 0, 0, -0.0 }, { 0, 0, 0, 0 } } } }, dtype)
      for _, zl in ipairs { z, z:transpose(3, 4):clone():transpose(3, 4) } do
        local y, idx = nn.max_pool2d(zl, 2, { return_indices = true })
        local yt = flat(y)
        assert.are.same({ -inf, inf }, { 1 / yt[1], 1 / yt[2] })
        H.equal(idx, { { { { 1, 3 } } } })
      end
    end
  end)

  it("gives -inf and index 0 to a window that covers no input element", function()
    -- taps at rows -1 and 2 of a 2-row input: all in the padding or beyond
    local x = tide.tensor({ { { { 1, 2 }, { 3, 4 } } } }, "float64")
    local y, idx = nn.max_pool2d(x, 2, { padding = 1, dilation = 3, stride = 1, return_indices = true })
    H.equal(y, { { { { -math.huge } } } })
    H.equal(idx, { { { { 0 } } } })
    H.equal(nn.max_pool2d_backward(tide.ones(1, 1, 1, 1, "float64"), idx, x), tide.zeros(1, 1, 2, 2, "float64"))
  end)

  it("matches central differences of the forward", function()
    for _, case in ipairs { max_cases[2], max_cases[3], max_cases[6] } do
      local xs, k, opts = case[2], case[3], case[4]
      local g = pool_geom(xs, k, opts)
      local xv = values(xs)
      local ys = { g.n, g.c, g.oh, g.ow }
      local r = values(ys)
      local num = numeric_grad(function(t) return nn.max_pool2d(t, k, opts) end, xv, xs, r)
      local o = { return_indices = true }
      for key, v in pairs(opts) do o[key] = v end
      local _, idx = nn.max_pool2d(tensor(xv, xs), k, o)
      close(nn.max_pool2d_backward(tensor(r, ys), idx, xs), num, xs, 1e-6, 1e-7, case[1])
    end
  end)

  it("reads non-contiguous inputs and gradients", function()
    local xs = { 2, 3, 6, 7 }
    local g = pool_geom(xs, 3, { stride = 2, padding = 1 })
    local xv = values(xs)
    local x = tensor(xv, xs)
    local yv, iv = ref_max_pool(xv, g)
    local ys = { g.n, g.c, g.oh, g.ow }
    local gyv = values(ys)
    for name, xl in pairs { channels_last = x:permute(1, 3, 4, 2):clone():permute(1, 4, 2, 3),
                            transposed = x:transpose(3, 4):clone():transpose(3, 4), strided = H.layouts(x).strided } do
      local y, idx = nn.max_pool2d(xl, 3, { stride = 2, padding = 1, return_indices = true })
      close(y, yv, ys, 0, 0, name)
      close(idx, iv, ys, 0, 0, name)
      local gy = tensor(gyv, ys):transpose(3, 4):clone():transpose(3, 4)
      local il = idx:permute(1, 3, 4, 2):clone():permute(1, 4, 2, 3)
      close(nn.max_pool2d_backward(gy, il, xs), ref_max_pool_grad(gyv, iv, g), xs, 1e-12, 1e-12, name)
    end
  end)

  it("splits many planes across threads", function()
    local xs = { 16, 32, 12, 12 }
    local g = pool_geom(xs, 2, {})
    local xv = values(xs)
    local y, idx = nn.max_pool2d(tensor(xv, xs, "float32"), 2, { return_indices = true })
    local yv, iv = ref_max_pool(flat(tensor(xv, xs, "float32")), g)
    close(y, yv, { 16, 32, 6, 6 }, 0, 0)
    close(idx, iv, { 16, 32, 6, 6 }, 0, 0)
  end)

  it("handles an empty batch", function()
    local y, idx = nn.max_pool2d(tide.zeros(0, 2, 4, 4), 2, { return_indices = true })
    assert.are.same({ 0, 2, 2, 2 }, y:shape())
    assert.are.same({ 0, 2, 2, 2 }, idx:shape())
    assert.are.same({ 0, 2, 4, 4 }, nn.max_pool2d_backward(tide.zeros(0, 2, 2, 2), idx, { 0, 2, 4, 4 }):shape())
  end)

  it("reports bad shapes, dtypes, parameters and indices", function()
    local x = tide.zeros(1, 1, 4, 4)
    local function e(f, msg) assert.has_error(f, msg) end
    e(function() nn.max_pool2d(tide.zeros(4, 4), 2) end, "max_pool2d: expects a 4-d input [N,C,H,W], got shape [4,4]")
    e(function() nn.max_pool2d(x:long(), 2) end, "max_pool2d: dtype int64 is not supported")
    e(function() nn.max_pool2d(x, { 0, 2 }) end, "max_pool2d: kernel_size must be positive, got (0, 2)")
    e(function() nn.max_pool2d(x, 2, { stride = -1 }) end, "max_pool2d: stride must be positive, got (-1, -1)")
    e(function() nn.max_pool2d(x, 2, { padding = { 0, -1 } }) end, "max_pool2d: padding must be non-negative, got (0, -1)")
    e(function() nn.max_pool2d(x, 2, { dilation = 0 }) end, "max_pool2d: dilation must be positive, got (0, 0)")
    e(function() nn.max_pool2d(x, 3, { padding = { 2, 0 } }) end,
      "max_pool2d: padding (2, 0) must be at most half of kernel_size (3, 3)")
    e(function() nn.max_pool2d(x, { 2, 3 }, { padding = { 1, 2 } }) end,
      "max_pool2d: padding (1, 2) must be at most half of kernel_size (2, 3)")
    e(function() nn.max_pool2d(tide.zeros(1, 1, 2, 1), 2, { stride = 1 }) end,
      "max_pool2d: output size 1x0 is too small for input of shape [1,1,2,1] (kernel 2x2, stride 1x1, padding 0x0, dilation 1x1)")
    e(function() nn.max_pool2d(tide.zeros(1, 1, 4, 4), 2, { dilation = 4 }) end,
      "max_pool2d: output size 0x0 is too small for input of shape [1,1,4,4] (kernel 2x2, stride 2x2, padding 0x0, dilation 4x4)")
    e(function() nn.max_pool2d(tide.zeros(1, 0, 4, 4), 2) end,
      "max_pool2d: expects an input with non-empty channels, height and width, got shape [1,0,4,4]")
    e(function() nn.max_pool2d(x, 2, { return_index = true }) end, "max_pool2d: unknown option 'return_index'")
    e(function() nn.max_pool2d(x) end, "max_pool2d: kernel_size must be a number or a table {h, w}, got nil")
    local _, idx = nn.max_pool2d(x, 2, { return_indices = true })
    local gy = tide.zeros(1, 1, 2, 2)
    e(function() nn.max_pool2d_backward(gy, idx:int(), x) end, "max_pool2d_backward: indices must be an int64 tensor, got int32")
    e(function() nn.max_pool2d_backward(gy, idx:reshape(1, 1, 1, 4), x) end,
      "max_pool2d_backward: indices of shape [1,1,1,4] do not match grad_output of shape [1,1,2,2]")
    e(function() nn.max_pool2d_backward(gy, idx, { 1, 2, 4, 4 }) end,
      "max_pool2d_backward: grad_output of shape [1,1,2,2] does not match an input of shape [1,2,4,4] in batch and channels")
    e(function() nn.max_pool2d_backward(gy:long(), idx, x) end,
      "max_pool2d_backward: grad_output must be a floating-point tensor, got int64")
    e(function() nn.max_pool2d_backward(gy, idx, { 1, 1, 0, 4 }) end,
      "max_pool2d_backward: expects an input with non-empty channels, height and width, got shape [1,1,0,4]")
    e(sync(function() return nn.max_pool2d_backward(gy, tide.tensor({ { { { 1, 2 }, { 17, 4 } } } }, "int64"), x) end),
      "max_pool2d_backward: index 17 is out of range for an input plane of 4x4")
    e(sync(function() return nn.max_pool2d_backward(gy, tide.tensor({ { { { 1, -1 }, { 3, 4 } } } }, "int64"), x) end),
      "max_pool2d_backward: index -1 is out of range for an input plane of 4x4")
    local bad = tide.tensor({ { { { 1, 2 }, { 3, 99 } } } }, "int64"):transpose(3, 4):clone():transpose(3, 4)
    e(sync(function() return nn.max_pool2d_backward(gy, bad, x) end),   -- strided indices: the general loop
      "max_pool2d_backward: index 99 is out of range for an input plane of 4x4")
  end)
end)

local avg_cases = {
  { "2x2", { 2, 3, 6, 6 }, 2, {} },
  { "3x3 stride 2 padding 1", { 1, 2, 7, 6 }, 3, { stride = 2, padding = 1 } },
  { "padding not counted", { 1, 2, 7, 6 }, 3, { stride = 2, padding = 1, count_include_pad = false } },
  { "ceil_mode, windows past the input", { 2, 1, 7, 8 }, { 3, 2 }, { stride = 2, ceil_mode = true } },
  { "ceil_mode, padding, not counted", { 1, 1, 6, 5 }, 3, { stride = 2, padding = 1, ceil_mode = true, count_include_pad = false } },
  { "divisor_override", { 1, 2, 5, 5 }, { 2, 3 }, { stride = 1, padding = { 1, 1 }, divisor_override = 5 } },
  { "negative divisor_override", { 1, 1, 4, 4 }, 2, { divisor_override = -3 } },
  -- 2x2 windows 2 apart inside the input take a vector loop per row, forward and backward: odd sizes
  -- leave a row and a column out, a vertical stride of 3 skips rows
  { "2x2 over odd sizes", { 2, 2, 7, 9 }, 2, {} },
  { "2x2, vertical stride 3", { 1, 2, 8, 6 }, 2, { stride = { 3, 2 } } },
  { "2x2, vertical stride 1: rows overlap, the backward adds twice", { 1, 2, 6, 6 }, 2, { stride = { 1, 2 } } },
  { "2x2 stride 2, padding counted", { 1, 1, 6, 6 }, 2, { stride = 2, padding = 1 } },
}

describe("avg_pool2d", function()
  it("computes hand-checked means", function()
    local x = tide.arange(1, 17, 1, "float32"):reshape(1, 1, 4, 4)
    H.equal(nn.avg_pool2d(x, 2), { { { { 3.5, 5.5 }, { 11.5, 13.5 } } } })
    H.close(nn.avg_pool2d(x, 3, { stride = 2, padding = 1 }), { { { { 14 / 9, 30 / 9 }, { 57 / 9, 99 / 9 } } } })
    H.equal(nn.avg_pool2d(x, 3, { stride = 2, padding = 1, count_include_pad = false }), { { { { 3.5, 5 }, { 9.5, 11 } } } })
    H.equal(nn.avg_pool2d_backward(tide.ones(1, 1, 2, 2), x, 2), tide.full({ 1, 1, 4, 4 }, 0.25))
  end)

  for _, case in ipairs(avg_cases) do
    local name, xs, k, opts = case[1], case[2], case[3], case[4]
    for _, dtype in ipairs { "float64", "float32" } do
      it("matches the reference and its adjoint: " .. name .. ", " .. dtype, function()
        local g = pool_geom(xs, k, opts)
        local xv = values(xs)
        local ys = { g.n, g.c, g.oh, g.ow }
        close(nn.avg_pool2d(tensor(xv, xs, dtype), k, opts), ref_avg_pool(xv, g, opts), ys, tol[dtype][1], tol[dtype][2])
        local gyv = values(ys)
        close(nn.avg_pool2d_backward(tensor(gyv, ys, dtype), xs, k, opts), ref_avg_pool_grad(gyv, g, opts), xs,
          tol[dtype][1], tol[dtype][2])
      end)
    end
  end

  it("matches central differences of the forward", function()
    for _, case in ipairs { avg_cases[3], avg_cases[5], avg_cases[6] } do
      local xs, k, opts = case[2], case[3], case[4]
      local g = pool_geom(xs, k, opts)
      local ys = { g.n, g.c, g.oh, g.ow }
      local r = values(ys)
      local num = numeric_grad(function(t) return nn.avg_pool2d(t, k, opts) end, values(xs), xs, r)
      close(nn.avg_pool2d_backward(tensor(r, ys), xs, k, opts), num, xs, 1e-6, 1e-7, case[1])
    end
  end)

  it("reads non-contiguous inputs and gradients", function()
    local xs, opts = { 2, 3, 6, 7 }, { stride = 2, padding = 1 }
    local g = pool_geom(xs, 3, opts)
    local xv = values(xs)
    local x = tensor(xv, xs)
    local ys = { g.n, g.c, g.oh, g.ow }
    local gyv = values(ys)
    local gy = tensor(gyv, ys):permute(1, 3, 4, 2):clone():permute(1, 4, 2, 3)
    for name, xl in pairs { transposed = x:transpose(3, 4):clone():transpose(3, 4), strided = H.layouts(x).strided } do
      close(nn.avg_pool2d(xl, 3, opts), ref_avg_pool(xv, g, opts), ys, 1e-12, 1e-12, name)
    end
    close(nn.avg_pool2d_backward(gy, xs, 3, opts), ref_avg_pool_grad(gyv, g, opts), xs, 1e-12, 1e-12)
  end)

  it("writes into given non-contiguous tensors, and computes float16 in float32", function()
    local xs, opts = { 2, 3, 6, 7 }, { stride = 2, padding = 1, ceil_mode = true }
    local g = pool_geom(xs, 3, opts)
    local xv = values(xs)
    local ys = { g.n, g.c, g.oh, g.ow }
    local gyv = values(ys)
    local yv, gxv = ref_avg_pool(xv, g, opts), ref_avg_pool_grad(gyv, g, opts)
    -- the C API's `out`: the forward writes through its strides, the backward through a buffer
    local out = tide.zeros({ ys[1], ys[3], ys[4], ys[2] }, "float64"):permute(1, 4, 2, 3)
    local gout = tide.zeros({ xs[1], xs[2], xs[4], xs[3] }, "float64"):transpose(3, 4)
    local x, gy = tensor(xv, xs), tensor(gyv, ys)
    local p = T.new_params()
    for i, v in ipairs { 3, 3, 2, 2, 1, 1, 1, 1, 0 } do p.ints[i - 1] = v end
    p.n_ints = 9
    T.ins_set(0, x)
    T.run(T.op_ids.avg_pool2d, 1, p, out)
    close(out, yv, ys, 1e-12, 1e-12)
    for i, v in ipairs(xs) do p.ints[8 + i] = v end
    p.n_ints = 13
    T.ins_set(0, gy)
    T.run(T.op_ids.avg_pool2d_backward, 1, p, gout)
    close(gout, gxv, xs, 1e-12, 1e-12)
    -- float16 in and out
    local y16 = nn.avg_pool2d(x:to("float16"), 3, opts)
    assert.are.equal("float16", y16:dtype())
    close(y16, ref_avg_pool(flat(x:to("float16")), g, opts), ys, 2e-3, 2e-3)
    local m16, i16 = nn.max_pool2d(x:to("float16"), 3, { stride = 2, padding = 1, ceil_mode = true, return_indices = true })
    local mv, iv = ref_max_pool(flat(x:to("float16")), g)
    close(m16, mv, ys, 0, 0)
    close(i16, iv, ys, 0, 0)
    close(nn.max_pool2d_backward(gy:to("float16"), i16, xs), ref_max_pool_grad(flat(gy:to("float16")), iv, g), xs, 2e-3, 2e-3)
  end)

  it("handles an empty batch", function()
    assert.are.same({ 0, 2, 2, 2 }, nn.avg_pool2d(tide.zeros(0, 2, 4, 4), 2):shape())
    assert.are.same({ 0, 2, 4, 4 }, nn.avg_pool2d_backward(tide.zeros(0, 2, 2, 2), { 0, 2, 4, 4 }, 2):shape())
  end)

  it("reports bad shapes and parameters", function()
    local x = tide.zeros(1, 1, 4, 4)
    local function e(f, msg) assert.has_error(f, msg) end
    e(function() nn.avg_pool2d(x, 2, { divisor_override = 0 }) end,
      "avg_pool2d: divisor_override must be a nonzero integer, got 0")
    e(function() nn.avg_pool2d(x, 2, { dilation = 2 }) end, "avg_pool2d: unknown option 'dilation'")
    e(function() nn.avg_pool2d(x, 2, { padding = 2 }) end, "avg_pool2d: padding (2, 2) must be at most half of kernel_size (2, 2)")
    e(function() nn.avg_pool2d(x, 5) end,
      "avg_pool2d: output size 0x0 is too small for input of shape [1,1,4,4] (kernel 5x5, stride 5x5, padding 0x0, dilation 1x1)")
    e(function() nn.avg_pool2d(x:int(), 2) end, "avg_pool2d: dtype int32 is not supported")
    e(function() nn.avg_pool2d_backward(tide.zeros(1, 1, 3, 2), x, 2) end,
      "avg_pool2d_backward: grad_output of shape [1,1,3,2] does not match avg_pool2d's result shape [1,1,2,2] for an input of shape [1,1,4,4]")
    e(function() nn.avg_pool2d_backward(tide.zeros(1, 1, 2, 2), { 1, 1, 4, -4 }, 2) end,
      "avg_pool2d_backward: input sizes must be non-negative, got [1,1,4,-4]")
    e(function() nn.avg_pool2d_backward(tide.zeros(1, 1, 2, 2), x, 2, { stride = 0 }) end,
      "avg_pool2d_backward: stride must be positive, got (0, 0)")
  end)
end)

describe("adaptive_avg_pool2d", function()
  local cases = {
    { "divisible", { 2, 3, 6, 8 }, { 3, 4 } },
    { "overlapping windows", { 1, 2, 5, 7 }, { 3, 4 } },
    { "larger output than input", { 1, 1, 3, 2 }, { 5, 3 } },
    { "global", { 2, 4, 7, 7 }, 1 },
  }
  for _, case in ipairs(cases) do
    local name, xs, os_ = case[1], case[2], case[3]
    for _, dtype in ipairs { "float64", "float32" } do
      it("matches the reference and its adjoint: " .. name .. ", " .. dtype, function()
        local oh, ow = pair(os_)
        local xv = values(xs)
        local ys = { xs[1], xs[2], oh, ow }
        local yv = zeros(numel(ys))
        adaptive_loops(xs, oh, ow, function(xi, yi, cnt) yv[yi] = yv[yi] + xv[xi] / cnt end)
        close(nn.adaptive_avg_pool2d(tensor(xv, xs, dtype), os_), yv, ys, tol[dtype][1], tol[dtype][2])
        local gyv, gxv = values(ys), zeros(numel(xs))
        adaptive_loops(xs, oh, ow, function(xi, yi, cnt) gxv[xi] = gxv[xi] + gyv[yi] / cnt end)
        close(nn.adaptive_avg_pool2d_backward(tensor(gyv, ys, dtype), xs), gxv, xs, tol[dtype][1], tol[dtype][2])
      end)
    end
  end

  it("matches central differences of the forward", function()
    local xs = { 1, 2, 5, 7 }
    local r = values({ 1, 2, 3, 4 })
    local num = numeric_grad(function(t) return nn.adaptive_avg_pool2d(t, { 3, 4 }) end, values(xs), xs, r)
    close(nn.adaptive_avg_pool2d_backward(tensor(r, { 1, 2, 3, 4 }), xs), num, xs, 1e-6, 1e-7)
  end)

  it("reads non-contiguous inputs, and handles empty batches and outputs", function()
    local xs = { 2, 3, 5, 6 }
    local xv = values(xs)
    local x = tensor(xv, xs)
    local expect = nn.adaptive_avg_pool2d(x, { 2, 4 })
    H.close(nn.adaptive_avg_pool2d(x:permute(1, 3, 4, 2):clone():permute(1, 4, 2, 3), { 2, 4 }), expect, 1e-12, 1e-12)
    assert.are.same({ 0, 3, 2, 2 }, nn.adaptive_avg_pool2d(tide.zeros(0, 3, 5, 6), 2):shape())
    assert.are.same({ 2, 3, 0, 2 }, nn.adaptive_avg_pool2d(x, { 0, 2 }):shape())
    assert.are.same({ 0, 3, 5, 6 }, nn.adaptive_avg_pool2d_backward(tide.zeros(0, 3, 2, 2), { 0, 3, 5, 6 }):shape())
  end)

  it("reports bad shapes and sizes", function()
    local function e(f, msg) assert.has_error(f, msg) end
    e(function() nn.adaptive_avg_pool2d(tide.zeros(1, 1, 4, 4), { -1, 2 }) end,
      "adaptive_avg_pool2d: output_size must be non-negative, got (-1, 2)")
    e(function() nn.adaptive_avg_pool2d(tide.zeros(2, 3, 0, 4), 2) end,
      "adaptive_avg_pool2d: expects an input with non-empty channels, height and width, got shape [2,3,0,4]")
    e(function() nn.adaptive_avg_pool2d(tide.zeros(3, 4, 4), 2) end,
      "adaptive_avg_pool2d: expects a 4-d input [N,C,H,W], got shape [3,4,4]")
    e(function() nn.adaptive_avg_pool2d_backward(tide.zeros(1, 2, 2, 2), { 1, 3, 4, 4 }) end,
      "adaptive_avg_pool2d_backward: grad_output of shape [1,2,2,2] does not match adaptive_avg_pool2d's result shape [1,3,2,2] for an input of shape [1,3,4,4]")
    e(function() nn.adaptive_avg_pool2d_backward(tide.zeros(1, 2, 2, 2), tide.zeros(2, 4, 4)) end,
      "adaptive_avg_pool2d_backward: input_size must be a table of 4 sizes or a 4-d tensor, got a table of 3")
  end)
end)
