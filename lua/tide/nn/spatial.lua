--- tide.nn's spatial layers beyond conv.lua's: 1-d convolution and pooling
-- (the 2-d ops on [N, C, 1, L]), transposed convolutions, group and instance
-- normalisation, padding, interpolation, pixel (un)shuffling and unfold/fold, as
-- torch.nn has them. Everything is composed of tensor ops that autograd
-- differentiates through their own rules; no new kernels, no host reads.
local tide = require "tide"
local B = require "bindings.ffi"
local args = require "tide.args"
local helpers = require "tide.nn.helpers"
local fail = B.fail
local no_grad = tide.no_grad
local floor = math.floor

return function(nn)
  local F, Module, init = nn.functional, nn.Module, nn.init

  -- -- helpers ---------------------------------------------------------------------

  local shape_str, is_int, need_tensor, need_float = args.shape_str, args.is_int, args.need_tensor, args.need_float
  local options, need_bool, positive = args.options, args.need_bool, args.positive

  -- An integer given as a number or a table {n} (1-d options, as PyTorch's (n,)).
  local function single(v, name, what, default)
    if v == nil then v = default end
    if type(v) == "table" and #v == 1 then v = v[1] end
    if not is_int(v) then
      fail(string.format("%s: %s must be an integer or a table {n}, got %s", name, what,
        type(v) == "table" and ("a table of " .. #v) or tostring(v)))
    end
    return v
  end

  -- h, w of a number or a table {h, w}.
  local function pair(v, name, what, default) return unpack(helpers.sizes(v, 2, name, what, default)) end

  -- n, or the n of a table {n}, as a string
  local function one(v) return tostring(type(v) == "table" and v[1] or v) end

  local on = helpers.on

  -- f on x with a batch dim: x has `batched` dims, or one fewer; the errors here name x's dims.
  local function with_batch(name, x, batched, layout, f)
    return helpers.with_batch(name, x, batched, layout, f, true)
  end

  -- Checks a 1-d window (kernel k, stride s, padding p, dilation d) over x3's last dim.
  local function check_window(name, x3, k, s, p, d, pool)
    if k < 1 or s < 1 or d < 1 or p < 0 or (pool and 2 * p > k) then
      fail(string.format("%s: kernel_size %d, stride %d and dilation %d must be positive and padding %d %s", name,
        k, s, d, p, pool and "between 0 and half the kernel" or "non-negative"))
    end
    local l = x3:size(3)
    if l + 2 * p < d * (k - 1) + 1 then
      fail(string.format("%s: kernel_size %d (dilation %d) is larger than the padded input %d (input %s, padding %d)",
        name, k, d, l + 2 * p, shape_str(x3), p))
    end
  end

  -- Python's repr of a tuple of integers: (3,) or (3, 5).
  local function tuple(v, n)
    if type(v) ~= "table" then
      v = n == 1 and { v } or { v, v }
    end
    if #v == 1 then return string.format("(%s,)", tostring(v[1])) end
    local s = {}
    for i = 1, #v do s[i] = tostring(v[i]) end
    return "(" .. table.concat(s, ", ") .. ")"
  end

  -- -- padding -------------------------------------------------------------------------

  local PAD_MODES = { constant = true, reflect = true, replicate = true, circular = true }

  -- The 1-based indices into a dim of size n that mode `mode` reads for pads
  -- lo and hi (either may be negative: a crop): an int64 tensor on x's device.
  local function pad_index(x, mode, n, lo, hi)
    local j = tide.arange(-lo, n + hi, { dtype = "float64", device = x:device() })
    if mode == "reflect" then
      j = -((j:abs() - (n - 1)):abs()) + (n - 1)
    elseif mode == "replicate" then
      j = j:clamp(0, n - 1)
    else
      j = j:remainder(n)
    end
    return j:long() + 1
  end

  --- F.pad(x, pad, opts): pads (or, with negative values, crops) the last
  -- dimensions of x, as torch.nn.functional.pad. pad lists the amounts for the
  -- last dimension first: {left, right, top, bottom, front, back}.
  -- @param x a tensor
  -- @param pad a table of an even number of integers (at most 2 x:dim())
  -- @param opts {mode = "constant", value = 0}, or the mode (and value as argument 4); mode "constant",
  -- "reflect" (mirrored without the edge; pads below the size), "replicate"
  -- (the edge repeated) or "circular" (wrapped around; pads at most the size).
  -- The other modes pad the last 1, 2 or 3 dims of a ([N,] C, ...) input.
  -- @return the padded tensor
  -- @usage local y = F.pad(x, { 1, 1, 2, 0 }, { mode = "reflect" })
  function F.pad(x, pad, opts, fill)
    need_tensor(x, "pad", "input")
    if type(opts) == "string" then opts = { mode = opts, value = fill } end
    opts = options(opts, "pad", { mode = true, value = true })
    local mode, value = opts.mode or "constant", opts.value
    if not PAD_MODES[mode] then
      fail(string.format("pad: mode must be 'constant', 'reflect', 'replicate' or 'circular', got %s", tostring(mode)))
    end
    if type(pad) ~= "table" or #pad % 2 ~= 0 then
      fail(string.format("pad: pad must be a table of an even number of integers, got %s",
        type(pad) == "table" and ("a table of " .. #pad) or type(pad)))
    end
    for i = 1, #pad do
      if not is_int(pad[i]) then fail(string.format("pad: pad values must be integers, got %s", tostring(pad[i]))) end
    end
    local k, nd = #pad / 2, x:dim()
    if k > nd then
      fail(string.format("pad: %d pad values pad %d dimensions, but the input %s has %d", #pad, k, shape_str(x), nd))
    end
    if mode ~= "constant" then
      if value ~= nil then fail(string.format("pad: mode '%s' takes no value, got %s", mode, tostring(value))) end
      if k < 1 or k > 3 or (nd ~= k + 1 and nd ~= k + 2) then
        fail(string.format("pad: mode '%s' pads the last 1, 2 or 3 dims of a ([N,] C, ...) input; %d pad values need a %d-d or %d-d input, got %s",
          mode, #pad, k + 1, k + 2, shape_str(x)))
      end
    elseif value ~= nil and type(value) ~= "number" then
      fail("pad: value must be a number, got " .. type(value))
    end
    value = value or 0
    local y = x
    for i = 1, k do
      local d, lo, hi = nd - i + 1, pad[2 * i - 1], pad[2 * i]
      local n = y:size(d)
      if n + lo + hi < 0 then
        fail(string.format("pad: padding (%d, %d) of dimension %d (size %d) of input %s leaves a negative size",
          lo, hi, d, n, shape_str(x)))
      end
      if mode == "constant" then
        local clo, chi = math.max(0, -lo), math.max(0, -hi)
        if clo + chi > 0 then y = y:narrow(d, 1 + clo, n - clo - chi) end
        if lo > 0 or hi > 0 then
          local parts, s = {}, y:shape()
          if lo > 0 then s[d] = lo; parts[#parts + 1] = tide.full(s, value, on(x)) end
          parts[#parts + 1] = y
          if hi > 0 then s = y:shape(); s[d] = hi; parts[#parts + 1] = tide.full(s, value, on(x)) end
          y = tide.cat(parts, d)
        end
      elseif lo ~= 0 or hi ~= 0 then
        if mode == "reflect" and (lo >= n or hi >= n) then
          fail(string.format("pad: reflect padding (%d, %d) must be below the size %d of dimension %d of input %s",
            lo, hi, n, d, shape_str(x)))
        elseif mode == "circular" and (lo > n or hi > n) then
          fail(string.format("pad: circular padding (%d, %d) must be at most the size %d of dimension %d of input %s",
            lo, hi, n, d, shape_str(x)))
        elseif n == 0 then
          fail(string.format("pad: mode '%s' cannot pad dimension %d of size 0 of input %s", mode, d, shape_str(x)))
        end
        y = y:index_select(d, pad_index(x, mode, n, lo, hi))
      end
    end
    if rawequal(y, x) then y = x:clone() end   -- a new tensor, as PyTorch's, even for no padding
    return y
  end

  -- ZeroPad2d & co: padding a number or a table of 2 n numbers.
  local function pad_class(cname, n, mode, with_value)
    local cls = Module:extend(cname)
    function cls:init(padding, value)
      local p
      if is_int(padding) then
        p = {}
        for i = 1, 2 * n do p[i] = padding end
      elseif type(padding) == "table" and #padding == 2 * n then
        p = {}
        for i = 1, 2 * n do
          if not is_int(padding[i]) then
            fail(string.format("%s: padding values must be integers, got %s", cname, tostring(padding[i])))
          end
          p[i] = padding[i]
        end
      else
        fail(string.format("%s: padding must be an integer or a table of %d integers, got %s", cname, 2 * n,
          type(padding) == "table" and ("a table of " .. #padding) or tostring(padding)))
      end
      self.padding = p
      if with_value then
        if type(value) ~= "number" then fail(string.format("%s: value must be a number, got %s", cname, type(value))) end
        self.value = value
      end
    end
    function cls:forward(x)
      if mode == "constant" then return F.pad(x, self.padding, { value = self.value or 0 }) end
      return F.pad(x, self.padding, mode)
    end
    function cls:extra_repr()
      if with_value then return string.format("padding=%s, value=%s", tuple(self.padding), tostring(self.value)) end
      return tuple(self.padding)
    end
    nn[cname] = cls
  end
  for n = 1, 3 do
    --- nn.ZeroPad1d/2d/3d(padding), nn.ConstantPad1d/2d/3d(padding, value), nn.ReflectionPad1d/2d/3d,
    -- nn.ReplicationPad1d/2d/3d, nn.CircularPad1d/2d/3d (padding): F.pad with padding a number or
    -- {left, right} (1d), {left, right, top, bottom} (2d) or {left, right, top, bottom, front, back} (3d).
    -- @usage local pad = nn.ReflectionPad2d({ 1, 1, 2, 0 })
    pad_class("ZeroPad" .. n .. "d", n, "constant", false)
    pad_class("ConstantPad" .. n .. "d", n, "constant", true)
    pad_class("ReflectionPad" .. n .. "d", n, "reflect", false)
    pad_class("ReplicationPad" .. n .. "d", n, "replicate", false)
    pad_class("CircularPad" .. n .. "d", n, "circular", false)
  end

  -- -- 1-d convolution ---------------------------------------------------------------------

  local CONV_OPTS = { stride = true, padding = true, dilation = true, groups = true }

  --- F.conv1d(x, weight, bias, {stride=1, padding=0, dilation=1, groups=1}): 1-d
  -- cross-correlation, as torch.nn.functional.conv1d: conv2d on [N, C, 1, L].
  -- @param x [N, C, L] or [C, L]
  -- @param weight [O, C/groups, k]
  -- @param bias [O] or nil
  -- @param opts each option an integer or {n}; padding also "valid" or "same" (stride 1;
  -- an odd total pads the right one more, as PyTorch)
  -- @return [N, O, oL], oL = floor((L + 2 padding - dilation (k - 1) - 1) / stride) + 1
  -- @usage local y = F.conv1d(x, w, b, { padding = "same" })
  function F.conv1d(x, weight, bias, opts)
    opts = options(opts, "conv1d", CONV_OPTS)
    need_tensor(weight, "conv1d", "weight")
    if weight:dim() ~= 3 then
      fail(string.format("conv1d: weight must be 3-d [out_channels, in_channels/groups, kernel_size], got %s",
        shape_str(weight)))
    end
    return (with_batch("conv1d", x, 3, "C, L", function(x3)
      local groups = helpers.conv_groups("conv1d", x3, weight, bias, opts)
      local s = single(opts.stride, "conv1d", "stride", 1)
      local d = single(opts.dilation, "conv1d", "dilation", 1)
      local p = opts.padding
      if p == "same" then
        if s ~= 1 then fail(string.format("conv1d: padding='same' needs stride 1, got %d", s)) end
        local total = d * (weight:size(3) - 1)
        p = floor(total / 2)
        if total % 2 == 1 then x3 = F.pad(x3, { 0, 1 }) end
      elseif p == "valid" then
        p = 0
      else
        p = single(p, "conv1d", "padding", 0)
      end
      check_window("conv1d", x3, weight:size(3), s, p, d, false)
      return F.conv2d(x3:unsqueeze(3), weight:unsqueeze(3), bias,
        { stride = { 1, s }, padding = { 0, p }, dilation = { 1, d }, groups = groups }):squeeze(3)
    end))
  end

  -- -- transposed convolution ------------------------------------------------------------

  local CONVT_OPTS = { stride = true, padding = true, output_padding = true, dilation = true, groups = true }

  -- Inserts s - 1 zeros between the elements of dim d (of size n >= 1).
  local function dilate(x, d, s)
    local n = x:size(d)
    if s == 1 or n == 0 then return x end
    local z = x:unsqueeze(d + 1)
    local zs = z:shape()
    zs[d + 1] = s - 1
    z = tide.cat({ z, tide.zeros(zs, on(x)) }, d + 1)
    local shape = x:shape()
    shape[d] = n * s
    return z:reshape(shape):narrow(d, 1, (n - 1) * s + 1)
  end

  -- The transposed convolution of a 4-d x; name, x1 and w1 (the user's 1-d
  -- input and weight, or nil) make the errors speak of what the user passed.
  local function conv_transpose(name, x4, weight, bias, opts, x1, w1)
    local function sizes(a, b) return x1 and tostring(b) or string.format("{%d, %d}", a, b) end
    local xs, ws = shape_str(x1 or x4), shape_str(w1 or weight)
    local groups = helpers.conv_transpose_groups(name, x4, weight, bias, opts, xs, ws)
    local cin, cout_g, kh, kw = weight:size(1), weight:size(2), weight:size(3), weight:size(4)
    local sh, sw = pair(opts.stride, name, "stride", 1)
    local ph, pw = pair(opts.padding, name, "padding", 0)
    local oph, opw = pair(opts.output_padding, name, "output_padding", 0)
    local dh, dw = pair(opts.dilation, name, "dilation", 1)
    if sh < 1 or sw < 1 or dh < 1 or dw < 1 or ph < 0 or pw < 0 then
      fail(string.format("%s: stride and dilation must be positive and padding non-negative, got stride %s, dilation %s, padding %s",
        name, sizes(sh, sw), sizes(dh, dw), sizes(ph, pw)))
    end
    if oph < 0 or opw < 0 or (oph >= sh and oph >= dh) or (opw >= sw and opw >= dw) then
      fail(string.format("%s: output_padding %s must be non-negative and below either stride %s or dilation %s",
        name, sizes(oph, opw), sizes(sh, sw), sizes(dh, dw)))
    end
    local h, w = x4:size(3), x4:size(4)
    local oh = (h - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
    local ow = (w - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
    if h < 1 or w < 1 or oh < 1 or ow < 1 then
      fail(string.format("%s: input %s with weight %s gives an output of %s", name, xs, ws,
        x1 and tostring(ow) or string.format("%dx%d", oh, ow)))
    end
    -- The gradient of conv2d's input is this op: conv2d_backward_input (its own kernels,
    -- cuDNN's on CUDA, and differentiable) skips the zeros the composition below inserts,
    -- s^2 times less work at stride s. Its result must be a size conv2d maps back to x's,
    -- which output_padding below the stride keeps.
    if oph < sh and opw < sw then
      local y = require("tide.nn_ops").conv2d_backward_input(x4, weight, { x4:size(1), cout_g * groups, oh, ow },
        { stride = { sh, sw }, padding = { ph, pw }, dilation = { dh, dw }, groups = groups })
      if bias ~= nil then y = y + bias:reshape(1, cout_g * groups, 1, 1) end
      return y
    end
    -- the padding around the zero-dilated input: conv2d pads what it can, F.pad the rest (or crops)
    local qh, qw = dh * (kh - 1) - ph, dw * (kw - 1) - pw
    local ch, cw = math.max(qh, 0), math.max(qw, 0)
    local xp = dilate(dilate(x4, 3, sh), 4, sw)
    if qh - ch ~= 0 or qw - cw ~= 0 or oph ~= 0 or opw ~= 0 then
      xp = F.pad(xp, { qw - cw, qw - cw + opw, qh - ch, qh - ch + oph })
    end
    local g = groups
    local wt = weight:reshape(g, cin / g, cout_g, kh, kw):transpose(2, 3):reshape(g * cout_g, cin / g, kh, kw)
    return F.conv2d(xp, wt:flip(3, 4), bias, { padding = { ch, cw }, dilation = { dh, dw }, groups = g })
  end

  --- F.conv_transpose2d(x, weight, bias, {stride=1, padding=0, output_padding=0,
  -- groups=1, dilation=1}): the transposed 2-d convolution (the gradient of
  -- conv2d with respect to its input), as torch.nn.functional.conv_transpose2d.
  -- Composed of differentiable ops: x with stride - 1 zeros inserted between
  -- its elements, padded by dilation (k - 1) - padding (plus output_padding
  -- at the end), convolved with the flipped weight, its in/out dims swapped.
  -- @param x [N, C_in, H, W] or [C_in, H, W]
  -- @param weight [C_in, C_out/groups, kH, kW]
  -- @param bias [C_out] or nil
  -- @param opts each option an integer or {h, w}; output_padding below stride or dilation
  -- @return [N, C_out, oH, oW], oH = (H - 1) stride - 2 padding + dilation (kH - 1) + output_padding + 1
  -- @usage local y = F.conv_transpose2d(x, w, nil, { stride = 2, padding = 1, output_padding = 1 })
  function F.conv_transpose2d(x, weight, bias, opts)
    local name = "conv_transpose2d"
    opts = options(opts, name, CONVT_OPTS)
    need_tensor(weight, name, "weight")
    if weight:dim() ~= 4 then
      fail(string.format("%s: weight must be 4-d [in_channels, out_channels/groups, kH, kW], got %s", name,
        shape_str(weight)))
    end
    return (with_batch(name, x, 4, "C, H, W", function(x4)
      return conv_transpose(name, x4, weight, bias, opts)
    end))
  end

  --- F.conv_transpose1d(x, weight, bias, {stride=1, padding=0, output_padding=0,
  -- groups=1, dilation=1}): the transposed 1-d convolution, as
  -- torch.nn.functional.conv_transpose1d (conv_transpose2d on [N, C, 1, L]).
  -- @param x [N, C_in, L] or [C_in, L]
  -- @param weight [C_in, C_out/groups, k]
  -- @param bias [C_out] or nil
  -- @param opts each option an integer or {n}
  -- @return [N, C_out, oL], oL = (L - 1) stride - 2 padding + dilation (k - 1) + output_padding + 1
  -- @usage local y = F.conv_transpose1d(x, w, b, { stride = 2 })
  function F.conv_transpose1d(x, weight, bias, opts)
    local name = "conv_transpose1d"
    opts = options(opts, name, CONVT_OPTS)
    need_tensor(weight, name, "weight")
    if weight:dim() ~= 3 then
      fail(string.format("%s: weight must be 3-d [in_channels, out_channels/groups, kernel_size], got %s", name,
        shape_str(weight)))
    end
    local o2 = { stride = { 1, single(opts.stride, name, "stride", 1) },
                 padding = { 0, single(opts.padding, name, "padding", 0) },
                 output_padding = { 0, single(opts.output_padding, name, "output_padding", 0) },
                 dilation = { 1, single(opts.dilation, name, "dilation", 1) }, groups = opts.groups }
    return (with_batch(name, x, 3, "C, L", function(x3)
      return conv_transpose(name, x3:unsqueeze(3), weight:unsqueeze(3), bias, o2, x3, weight):squeeze(3)
    end))
  end

  -- -- convolution layers ------------------------------------------------------------------

  -- Shared by Conv1d, ConvTranspose1d and ConvTranspose2d: n spatial dims.
  local function conv_init(self, cname, n, transposed, in_channels, out_channels, kernel_size, opts)
    helpers.conv_init(self, cname, transposed, in_channels, out_channels, function()
      local k = n == 1 and { single(kernel_size, cname, "kernel_size") } or { pair(kernel_size, cname, "kernel_size") }
      for i = 1, n do positive(k[i], cname, "kernel_size") end
      return k
    end, opts)
  end

  local function conv_repr(self, n)
    local s = string.format("%d, %d, kernel_size=%s, stride=%s", self.in_channels, self.out_channels,
      tuple(self.kernel_size, n), tuple(self.stride, n))
    local p = self.padding
    if type(p) == "string" then s = s .. ", padding=" .. p
    elseif p ~= 0 and not (type(p) == "table" and p[1] == 0 and (n == 1 or p[2] == 0)) then
      s = s .. ", padding=" .. tuple(p, n)
    end
    local d = self.dilation
    if d ~= 1 and not (type(d) == "table" and d[1] == 1 and (n == 1 or d[2] == 1)) then
      s = s .. ", dilation=" .. tuple(d, n)
    end
    local op = self.output_padding
    if op and op ~= 0 and not (type(op) == "table" and op[1] == 0 and (n == 1 or op[2] == 0)) then
      s = s .. ", output_padding=" .. tuple(op, n)
    end
    if self.groups ~= 1 then s = s .. ", groups=" .. self.groups end
    if self.bias == nil then s = s .. ", bias=false" end
    if self.padding_mode ~= "zeros" then s = s .. ", padding_mode=" .. self.padding_mode end
    return s
  end

  --- nn.Conv1d(in_channels, out_channels, kernel_size, opts): a 1-d convolution
  -- layer, as torch.nn.Conv1d; opts {stride=1, padding=0 (or "valid", "same"),
  -- dilation=1, groups=1, bias=true, padding_mode="zeros" (or "reflect",
  -- "replicate", "circular"), dtype, device}. weight [out, in/groups, k] and
  -- bias [out] are initialised as PyTorch does (Kaiming-uniform, a = sqrt(5)).
  -- @usage local conv = nn.Conv1d(16, 33, 3, { stride = 2 })
  local Conv1d = Module:extend("Conv1d")
  function Conv1d:init(in_channels, out_channels, kernel_size, opts)
    conv_init(self, "Conv1d", 1, false, in_channels, out_channels, kernel_size, opts)
  end
  --- Draws the weight and bias again, as at creation.
  function Conv1d:reset_parameters() init.reset_linear_(self.weight, self.bias) end
  function Conv1d:forward(x)
    local o = { stride = self.stride, padding = self.padding, dilation = self.dilation, groups = self.groups }
    if self.padding_mode ~= "zeros" then
      local p = single(self.padding, "Conv1d", "padding")
      x = F.pad(x, { p, p }, self.padding_mode)
      o.padding = 0
    end
    return F.conv1d(x, self.weight, self.bias, o)
  end
  function Conv1d:extra_repr() return conv_repr(self, 1) end
  nn.Conv1d = Conv1d

  --- nn.ConvTranspose2d(in_channels, out_channels, kernel_size, opts): a transposed
  -- 2-d convolution layer, as torch.nn.ConvTranspose2d; opts {stride=1, padding=0,
  -- output_padding=0, groups=1, bias=true, dilation=1, dtype, device}, each size an
  -- integer or {h, w}. weight [in, out/groups, kH, kW] and bias [out] are
  -- initialised as PyTorch does (Kaiming-uniform, a = sqrt(5); fan_in = out/groups kH kW).
  -- forward(x, output_size) picks the output_padding that gives output_size ({h, w}).
  -- @usage local up = nn.ConvTranspose2d(16, 8, 3, { stride = 2, padding = 1, output_padding = 1 })
  local ConvTranspose2d = Module:extend("ConvTranspose2d")
  --- nn.ConvTranspose1d(in_channels, out_channels, kernel_size, opts): as
  -- ConvTranspose2d for [N, C, L] input; weight [in, out/groups, k].
  -- @usage local up = nn.ConvTranspose1d(4, 2, 3, { stride = 2 })
  local ConvTranspose1d = Module:extend("ConvTranspose1d")
  for n, cls in ipairs { ConvTranspose1d, ConvTranspose2d } do
    local cname = cls.__name
    local fn = n == 1 and F.conv_transpose1d or F.conv_transpose2d
    function cls:init(in_channels, out_channels, kernel_size, opts)
      conv_init(self, cname, n, true, in_channels, out_channels, kernel_size, opts)
    end
    --- Draws the weight and bias again, as at creation.
    function cls:reset_parameters() init.reset_linear_(self.weight, self.bias) end
    function cls:forward(x, output_size)
      local op = self.output_padding
      if output_size ~= nil then
        need_tensor(x, cname, "input")
        local size = type(output_size) == "table" and output_size or { output_size }
        if #size ~= n and #size ~= n + 1 and #size ~= n + 2 then
          fail(string.format("%s: output_size must have %d sizes, got %d", cname, n, #size))
        end
        op = {}
        for i = 1, n do
          local function at(v) return type(v) == "table" and v[i] or v end
          local len = x:size(x:dim() - n + i)
          local min = (len - 1) * at(self.stride) - 2 * at(self.padding) + at(self.dilation) * (self.kernel_size[i] - 1) + 1
          local want = size[#size - n + i]
          op[i] = want - min
          if op[i] < 0 or op[i] >= at(self.stride) then
            fail(string.format("%s: output_size %s is not reachable: dimension %d can be %d to %d", cname,
              tuple(size), i, min, min + at(self.stride) - 1))
          end
        end
      end
      return fn(x, self.weight, self.bias, { stride = self.stride, padding = self.padding,
        output_padding = op, dilation = self.dilation, groups = self.groups })
    end
    function cls:extra_repr() return conv_repr(self, n) end
  end
  nn.ConvTranspose1d, nn.ConvTranspose2d = ConvTranspose1d, ConvTranspose2d

  -- -- 1-d pooling ---------------------------------------------------------------------------

  local MAX1_OPTS = { stride = true, padding = true, dilation = true, ceil_mode = true, return_indices = true }
  local AVG1_OPTS = { stride = true, padding = true, ceil_mode = true, count_include_pad = true }

  -- 2-d pooling options from 1-d ones: each size {1, n}; and a check of them for a 3-d x.
  local function pool_opts(name, kernel, opts, known)
    opts = options(opts, name, known)
    local k = single(kernel, name, "kernel_size")
    local o, w = {}, {}
    for key, v in pairs(opts) do
      if key == "stride" or key == "padding" or key == "dilation" then
        w[key] = single(v, name, key)
        o[key] = { key == "padding" and 0 or 1, w[key] }
      else
        o[key] = v
      end
    end
    local function check(x3) check_window(name, x3, k, w.stride or k, w.padding or 0, w.dilation or 1, true) end
    return { 1, k }, o, check
  end

  --- F.max_pool1d(x, kernel, {stride=kernel, padding=0, dilation=1, ceil_mode=false,
  -- return_indices=false}): as torch.nn.functional.max_pool1d (max_pool2d on [N, C, 1, L]);
  -- indices are 1-based positions along L.
  -- @param x [N, C, L] or [C, L]
  -- @usage local y = F.max_pool1d(x, 2)
  function F.max_pool1d(x, kernel, opts)
    local k, o, check = pool_opts("max_pool1d", kernel, opts, MAX1_OPTS)
    return with_batch("max_pool1d", x, 3, "C, L", function(x3)
      check(x3)
      local y, idx = F.max_pool2d(x3:unsqueeze(3), k, o)
      return y:squeeze(3), idx and idx:squeeze(3)
    end)
  end

  --- F.avg_pool1d(x, kernel, {stride=kernel, padding=0, ceil_mode=false,
  -- count_include_pad=true}): as torch.nn.functional.avg_pool1d.
  -- @param x [N, C, L] or [C, L]
  -- @usage local y = F.avg_pool1d(x, 3, { stride = 2, padding = 1 })
  function F.avg_pool1d(x, kernel, opts)
    local k, o, check = pool_opts("avg_pool1d", kernel, opts, AVG1_OPTS)
    return (with_batch("avg_pool1d", x, 3, "C, L", function(x3)
      check(x3)
      return F.avg_pool2d(x3:unsqueeze(3), k, o):squeeze(3)
    end))
  end

  --- F.adaptive_avg_pool1d(x, output_size): averages over output_size windows that
  -- tile L, as torch.nn.functional.adaptive_avg_pool1d.
  -- @param x [N, C, L] or [C, L]
  -- @usage local y = F.adaptive_avg_pool1d(x, 1)
  function F.adaptive_avg_pool1d(x, output_size)
    local o = single(output_size, "adaptive_avg_pool1d", "output_size")
    return (with_batch("adaptive_avg_pool1d", x, 3, "C, L", function(x3)
      return F.adaptive_avg_pool2d(x3:unsqueeze(3), { 1, o }):squeeze(3)
    end))
  end

  --- nn.MaxPool1d(kernel_size, opts): opts {stride=kernel_size, padding=0, dilation=1,
  -- ceil_mode=false, return_indices=false}.
  -- @usage local pool = nn.MaxPool1d(2)
  local MaxPool1d = Module:extend("MaxPool1d")
  function MaxPool1d:init(kernel_size, opts) self.kernel_size, self.opts = kernel_size, opts or {} end
  function MaxPool1d:forward(x) return F.max_pool1d(x, self.kernel_size, self.opts) end
  function MaxPool1d:extra_repr()
    local o = self.opts
    return string.format("kernel_size=%s, stride=%s, padding=%s, dilation=%s, ceil_mode=%s",
      one(self.kernel_size), one(o.stride or self.kernel_size), one(o.padding or 0), one(o.dilation or 1),
      tostring(o.ceil_mode or false))
  end
  nn.MaxPool1d = MaxPool1d

  --- nn.AvgPool1d(kernel_size, opts): opts {stride=kernel_size, padding=0,
  -- ceil_mode=false, count_include_pad=true}.
  -- @usage local pool = nn.AvgPool1d(2)
  local AvgPool1d = Module:extend("AvgPool1d")
  function AvgPool1d:init(kernel_size, opts) self.kernel_size, self.opts = kernel_size, opts or {} end
  function AvgPool1d:forward(x) return F.avg_pool1d(x, self.kernel_size, self.opts) end
  function AvgPool1d:extra_repr()
    local o = self.opts
    return string.format("kernel_size=%s, stride=%s, padding=%s", tuple(self.kernel_size, 1),
      tuple(o.stride or self.kernel_size, 1), tuple(o.padding or 0, 1))
  end
  nn.AvgPool1d = AvgPool1d

  --- nn.AdaptiveAvgPool1d(output_size).
  -- @usage local gap = nn.AdaptiveAvgPool1d(1)
  local AdaptiveAvgPool1d = Module:extend("AdaptiveAvgPool1d")
  function AdaptiveAvgPool1d:init(output_size) self.output_size = output_size end
  function AdaptiveAvgPool1d:forward(x) return F.adaptive_avg_pool1d(x, self.output_size) end
  function AdaptiveAvgPool1d:extra_repr() return "output_size=" .. one(self.output_size) end
  nn.AdaptiveAvgPool1d = AdaptiveAvgPool1d

  -- -- normalisation -------------------------------------------------------------------------

  -- Checks that a and b (if given; named what_a and what_b) are [C].
  local function affine_check(name, x, a, b, what_a, what_b)
    local c = x:size(2)
    for i, t in ipairs { a or false, b or false } do
      if t then
        local what = i == 1 and (what_a or "weight") or (what_b or "bias")
        need_tensor(t, name, what)
        if t:dim() ~= 1 or t:size(1) ~= c then
          fail(string.format("%s: %s of shape %s does not match the %d channels of input %s", name, what,
            shape_str(t), c, shape_str(x)))
        end
      end
    end
  end

  -- The number of elements of each [n, c] plane of x [N, C, *].
  local function plane(x)
    local m = 1
    for i = 3, x:dim() do m = m * x:size(i) end
    return m
  end

  -- y * weight + bias, weight and bias [C] broadcast over x's [N, C, *].
  local function affine(y, weight, bias)
    if weight == nil and bias == nil then return y end
    local bshape = { y:size(2) }
    for i = 3, y:dim() do bshape[i - 1] = 1 end
    if weight ~= nil then y = y * weight:view(bshape) end
    if bias ~= nil then y = y + bias:view(bshape) end
    return y
  end

  --- F.group_norm(x, num_groups, weight, bias, eps): normalises each group of
  -- num_groups consecutive channels of each sample by its mean and biased
  -- variance, then scales by weight and shifts by bias per channel, as
  -- torch.nn.functional.group_norm.
  -- @param x [N, C, *], C divisible by num_groups
  -- @param num_groups a positive integer
  -- @param weight [C] or nil
  -- @param bias [C] or nil
  -- @param eps default 1e-5
  -- @return a tensor of x's shape
  -- @usage local y = F.group_norm(x, 2, w, b)
  function F.group_norm(x, num_groups, weight, bias, eps)
    need_float(x, "group_norm", "input")
    if x:dim() < 2 then
      fail(string.format("group_norm: input must be [N, C, ...] with at least 2 dimensions, got shape %s", shape_str(x)))
    end
    positive(num_groups, "group_norm", "num_groups")
    local n, c = x:size(1), x:size(2)
    if c % num_groups ~= 0 then
      fail(string.format("group_norm: the %d channels of input %s are not divisible by num_groups %d", c,
        shape_str(x), num_groups))
    end
    affine_check("group_norm", x, weight, bias)
    local xs = x:reshape(n, num_groups, c / num_groups * plane(x))
    local mean, var = xs:mean(3, true), xs:var(3, true, 0)
    local y = ((xs - mean) * (var + (eps or 1e-5)):rsqrt()):reshape(x:shape())
    return affine(y, weight, bias)
  end

  --- F.instance_norm(x, running_mean, running_var, weight, bias, use_input_stats,
  -- momentum, eps): normalises each channel of each sample over its spatial
  -- dims, as torch.nn.functional.instance_norm. With use_input_stats (default
  -- true) it uses each instance's mean and biased variance and updates
  -- running_mean/running_var (if given) in place, without gradient, with the
  -- batch's average instance mean and unbiased variance:
  -- r = (1 - momentum) r + momentum s. Otherwise it uses the running statistics.
  -- @param x [N, C, *] with at least one spatial dim
  -- @param running_mean, running_var [C] or nil
  -- @param weight, bias [C] or nil
  -- @param use_input_stats default true
  -- @param momentum default 0.1
  -- @param eps default 1e-5
  -- @return a tensor of x's shape
  -- @usage local y = F.instance_norm(x)
  function F.instance_norm(x, running_mean, running_var, weight, bias, use_input_stats, momentum, eps)
    need_float(x, "instance_norm", "input")
    if x:dim() < 3 then
      fail(string.format("instance_norm: input must be [N, C, ...] with at least 3 dimensions, got shape %s",
        shape_str(x)))
    end
    affine_check("instance_norm", x, weight, bias)
    affine_check("instance_norm", x, running_mean, running_var, "running_mean", "running_var")
    if (running_mean == nil) ~= (running_var == nil) then
      fail("instance_norm: running_mean and running_var must be given together")
    end
    momentum, eps = momentum or 0.1, eps or 1e-5
    local n, c = x:size(1), x:size(2)
    local bshape = { 1, c }
    for i = 3, x:dim() do bshape[i] = 1 end
    local mean, var
    if use_input_stats ~= false then
      local m = plane(x)
      if m == 1 then
        fail(string.format("instance_norm: expected more than 1 spatial element when training, got input of shape %s",
          shape_str(x)))
      end
      local xs = x:reshape(n, c, m)
      mean, var = xs:mean(3, true), xs:var(3, true, 0)
      if running_mean ~= nil then
        no_grad(function()
          running_mean:mul_(1 - momentum):add_(mean:detach():mean(1):view(c) * momentum)
          running_var:mul_(1 - momentum):add_(var:detach():mean(1):view(c) * (momentum * m / (m - 1)))
        end)
      end
      return affine(((xs - mean) * (var + eps):rsqrt()):reshape(x:shape()), weight, bias)
    end
    if running_mean == nil then
      fail("instance_norm: running_mean and running_var are required when use_input_stats is false")
    end
    mean, var = running_mean:view(bshape), running_var:view(bshape)
    return affine((x - mean) * (var + eps):rsqrt(), weight, bias)
  end

  --- nn.GroupNorm(num_groups, num_channels, opts): F.group_norm with a weight
  -- (ones) and bias (zeros) of num_channels; opts {eps=1e-5, affine=true, dtype, device}.
  -- @usage local norm = nn.GroupNorm(2, 6)
  local GroupNorm = Module:extend("GroupNorm")
  function GroupNorm:init(num_groups, num_channels, opts)
    local o = nn._opts_of(opts, "GroupNorm")
    positive(num_groups, "GroupNorm", "num_groups")
    positive(num_channels, "GroupNorm", "num_channels")
    if num_channels % num_groups ~= 0 then
      fail(string.format("GroupNorm: num_channels (%d) must be divisible by num_groups (%d)", num_channels, num_groups))
    end
    self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, o.eps or 1e-5, o.affine ~= false
    if self.affine then
      self:register_parameter("weight", nn._new_tensor({ num_channels }, o))
      self:register_parameter("bias", nn._new_tensor({ num_channels }, o))
    end
    self:reset_parameters()
  end
  --- Sets the weight to ones and the bias to zeros.
  function GroupNorm:reset_parameters()
    if self.affine then
      init.ones_(self.weight)
      init.zeros_(self.bias)
    end
  end
  function GroupNorm:forward(x)
    return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)
  end
  function GroupNorm:extra_repr()
    return string.format("%d, %d, eps=%g, affine=%s", self.num_groups, self.num_channels, self.eps, tostring(self.affine))
  end
  nn.GroupNorm = GroupNorm

  --- nn.InstanceNorm1d/2d(num_features, opts): F.instance_norm over [N, C, L] /
  -- [N, C, H, W] input (or one fewer dim, unbatched); opts {eps=1e-5,
  -- momentum=0.1, affine=false, track_running_stats=false, dtype, device}.
  -- With affine, a weight (ones) and bias (zeros) of num_features; with
  -- track_running_stats, the buffers running_mean, running_var and
  -- num_batches_tracked, used in evaluation mode.
  -- @usage local norm = nn.InstanceNorm2d(3, { affine = true })
  for n = 1, 2 do
    local cname = "InstanceNorm" .. n .. "d"
    local cls = Module:extend(cname)
    function cls:init(num_features, opts)
      local o = nn._opts_of(opts, cname)
      self.num_features = positive(num_features, cname, "num_features")
      self.eps, self.momentum = o.eps or 1e-5, o.momentum == nil and 0.1 or o.momentum
      if type(self.momentum) ~= "number" then
        fail(string.format("%s: momentum must be a number, got %s", cname, type(self.momentum)))
      end
      self.affine, self.track_running_stats = o.affine == true, o.track_running_stats == true
      if self.affine then
        self:register_parameter("weight", nn._new_tensor({ num_features }, o))
        self:register_parameter("bias", nn._new_tensor({ num_features }, o))
      end
      if self.track_running_stats then
        self:register_buffer("running_mean", nn._new_tensor({ num_features }, o))
        self:register_buffer("running_var", nn._new_tensor({ num_features }, o))
        self:register_buffer("num_batches_tracked", tide.zeros({}, { dtype = "int64", device = o.device }))
      end
      self:reset_parameters()
    end
    --- Resets the running statistics (if tracked), the weight to ones and the bias to zeros.
    function cls:reset_parameters()
      if self.track_running_stats then
        no_grad(function()
          self.running_mean:zero_()
          self.running_var:fill_(1)
          self.num_batches_tracked:zero_()
        end)
      end
      if self.affine then
        init.ones_(self.weight)
        init.zeros_(self.bias)
      end
    end
    function cls:forward(x)
      return (with_batch(cname, x, n + 2, n == 1 and "C, L" or "C, H, W", function(xb)
        if xb:size(2) ~= self.num_features then
          fail(string.format("%s: input %s has %d channels, expected num_features %d", cname, shape_str(xb),
            xb:size(2), self.num_features))
        end
        return F.instance_norm(xb, self.running_mean, self.running_var, self.weight, self.bias,
          self.training or not self.track_running_stats, self.momentum, self.eps)
      end))
    end
    function cls:extra_repr()
      return string.format("%d, eps=%g, momentum=%g, affine=%s, track_running_stats=%s", self.num_features, self.eps,
        self.momentum, tostring(self.affine), tostring(self.track_running_stats))
    end
    nn[cname] = cls
  end

  -- -- interpolation ---------------------------------------------------------------------------

  local INTERP_MODES = { nearest = 1, ["nearest-exact"] = 1, linear = 3, bilinear = 4, area = 0 }
  local INTERP_OPTS = { size = true, scale_factor = true, mode = true, align_corners = true,
                        recompute_scale_factor = true }

  local nearest_dim, linear_dim = helpers.nearest_dim, helpers.linear_dim

  --- F.interpolate(x, opts): resamples the spatial dims of x, as
  -- torch.nn.functional.interpolate. opts {size, scale_factor, mode="nearest",
  -- align_corners, recompute_scale_factor}: exactly one of size (an integer
  -- or a table, one per spatial dim) or scale_factor (a number or a table;
  -- the size is floor(in * scale_factor), and the coordinates scale by
  -- 1 / scale_factor unless recompute_scale_factor). Modes: "nearest" and
  -- "nearest-exact" (3-d or 4-d), "linear" (3-d), "bilinear" (4-d), "area"
  -- (adaptive average pooling); align_corners (default false) for the linear modes.
  -- @param x [N, C, L] or [N, C, H, W]
  -- @return [N, C, size...]
  -- @usage local y = F.interpolate(x, { scale_factor = 2, mode = "bilinear" })
  function F.interpolate(x, opts)
    need_float(x, "interpolate", "input")
    opts = options(opts, "interpolate", INTERP_OPTS)
    local mode = opts.mode or "nearest"
    local want = INTERP_MODES[mode]
    if want == nil then
      fail(string.format("interpolate: mode must be 'nearest', 'nearest-exact', 'linear', 'bilinear' or 'area', got %s",
        tostring(mode)))
    end
    local nd = x:dim()
    if nd ~= 3 and nd ~= 4 or (want > 1 and nd ~= want) then
      fail(string.format("interpolate: mode '%s' needs a %s input (N, C, %s), got %s", mode,
        want == 3 and "3-d" or want == 4 and "4-d" or "3-d or 4-d",
        want == 3 and "L" or want == 4 and "H, W" or "L or H, W", shape_str(x)))
    end
    local ac = opts.align_corners
    if ac ~= nil and want < 3 then
      fail(string.format("interpolate: align_corners can only be set with the linear modes, got mode '%s'", mode))
    end
    need_bool(ac, "interpolate", "align_corners")
    local k = nd - 2
    local size, sf = opts.size, opts.scale_factor
    helpers.need_size_or_scale(size, sf)
    local ins, outs, scales = {}, {}, {}
    for i = 1, k do
      ins[i] = x:size(2 + i)
      outs[i], scales[i] = helpers.interp_size(x, i, k, size, sf, opts.recompute_scale_factor)
      if ins[i] < 1 then fail(string.format("interpolate: input %s has an empty spatial dimension", shape_str(x))) end
    end
    if mode == "area" then
      if k == 1 then return F.adaptive_avg_pool1d(x, outs[1]) end
      return F.adaptive_avg_pool2d(x, outs)
    end
    local y = x
    for i = 1, k do
      local d = 2 + i
      if want == 1 then
        y = nearest_dim(y, d, ins[i], outs[i], scales[i], mode == "nearest-exact")
      else
        y = linear_dim(y, d - nd - 1, ins[i], outs[i], scales[i], ac == true)
      end
    end
    if rawequal(y, x) then y = x:clone() end
    return y
  end

  --- F.upsample(x, opts): F.interpolate, under the older name PyTorch keeps for it.
  -- @usage local y = F.upsample(x, { scale_factor = 2 })
  F.upsample = F.interpolate

  --- nn.Upsample(opts): F.interpolate with opts {size, scale_factor, mode="nearest",
  -- align_corners, recompute_scale_factor}, as torch.nn.Upsample.
  -- @usage local up = nn.Upsample({ scale_factor = 2, mode = "bilinear" })
  local Upsample = Module:extend("Upsample")
  function Upsample:init(opts)
    opts = options(opts, "Upsample", INTERP_OPTS)
    self.size, self.scale_factor, self.mode = opts.size, opts.scale_factor, opts.mode or "nearest"
    self.align_corners, self.recompute_scale_factor = opts.align_corners, opts.recompute_scale_factor
  end
  function Upsample:forward(x)
    return F.interpolate(x, { size = self.size, scale_factor = self.scale_factor, mode = self.mode,
      align_corners = self.align_corners, recompute_scale_factor = self.recompute_scale_factor })
  end
  function Upsample:extra_repr()
    local s = self.scale_factor ~= nil and "scale_factor=" .. (type(self.scale_factor) == "table"
      and tuple(self.scale_factor) or tostring(self.scale_factor))
      or "size=" .. (type(self.size) == "table" and tuple(self.size) or tostring(self.size))
    return s .. ", mode='" .. self.mode .. "'"
  end
  nn.Upsample = Upsample

  --- nn.UpsamplingNearest2d(opts) and nn.UpsamplingBilinear2d(opts): Upsample with
  -- mode "nearest", or "bilinear" with align_corners = true; opts {size, scale_factor}.
  -- @usage local up = nn.UpsamplingBilinear2d({ scale_factor = 2 })
  for cname, m in pairs { UpsamplingNearest2d = "nearest", UpsamplingBilinear2d = "bilinear" } do
    local cls = Upsample:extend(cname)
    function cls:init(opts)
      opts = options(opts, cname, { size = true, scale_factor = true })
      Upsample.init(self, { size = opts.size, scale_factor = opts.scale_factor, mode = m,
        align_corners = m == "bilinear" or nil })
    end
    nn[cname] = cls
  end

  -- -- pixel shuffle -------------------------------------------------------------------------

  -- The leading (batch) sizes of x's shape before its last 3, and their product.
  local function lead(x)
    local s, l, p = x:shape(), {}, 1
    for i = 1, #s - 3 do l[i] = s[i]; p = p * s[i] end
    return l, p
  end

  --- F.pixel_shuffle(x, upscale_factor): rearranges [*, C r^2, H, W] into
  -- [*, C, H r, W r], as torch.nn.functional.pixel_shuffle.
  -- @usage local y = F.pixel_shuffle(x, 2)
  function F.pixel_shuffle(x, r)
    need_tensor(x, "pixel_shuffle", "input")
    positive(r, "pixel_shuffle", "upscale_factor")
    if x:dim() < 3 then
      fail(string.format("pixel_shuffle: input must have at least 3 dimensions (*, C, H, W), got %s", shape_str(x)))
    end
    local c, h, w = x:size(-3), x:size(-2), x:size(-1)
    if c % (r * r) ~= 0 then
      fail(string.format("pixel_shuffle: the %d channels of input %s are not divisible by upscale_factor^2 = %d", c,
        shape_str(x), r * r))
    end
    local l, b = lead(x)
    local oc = c / (r * r)
    local y = x:reshape(b, oc, r, r, h, w):permute(1, 2, 5, 3, 6, 4)
    l[#l + 1], l[#l + 2], l[#l + 3] = oc, h * r, w * r
    return y:reshape(l)
  end

  --- F.pixel_unshuffle(x, downscale_factor): rearranges [*, C, H r, W r] into
  -- [*, C r^2, H, W], as torch.nn.functional.pixel_unshuffle.
  -- @usage local y = F.pixel_unshuffle(x, 2)
  function F.pixel_unshuffle(x, r)
    need_tensor(x, "pixel_unshuffle", "input")
    positive(r, "pixel_unshuffle", "downscale_factor")
    if x:dim() < 3 then
      fail(string.format("pixel_unshuffle: input must have at least 3 dimensions (*, C, H, W), got %s", shape_str(x)))
    end
    local c, h, w = x:size(-3), x:size(-2), x:size(-1)
    if h % r ~= 0 or w % r ~= 0 then
      fail(string.format("pixel_unshuffle: the height %d and width %d of input %s must be divisible by downscale_factor %d",
        h, w, shape_str(x), r))
    end
    local l, b = lead(x)
    local y = x:reshape(b, c, h / r, r, w / r, r):permute(1, 2, 4, 6, 3, 5)
    l[#l + 1], l[#l + 2], l[#l + 3] = c * r * r, h / r, w / r
    return y:reshape(l)
  end

  --- nn.PixelShuffle(upscale_factor) and nn.PixelUnshuffle(downscale_factor).
  -- @usage local ps = nn.PixelShuffle(3)
  for cname, spec in pairs { PixelShuffle = { "upscale_factor", F.pixel_shuffle },
                             PixelUnshuffle = { "downscale_factor", F.pixel_unshuffle } } do
    local key, fn = spec[1], spec[2]
    local cls = Module:extend(cname)
    function cls:init(r) self[key] = positive(r, cname, key) end
    function cls:forward(x) return fn(x, self[key]) end
    function cls:extra_repr() return key .. "=" .. self[key] end
    nn[cname] = cls
  end

  -- -- unfold and fold: sliding blocks as columns, and back ----------------------------------------

  -- The block geometry of an unfold/fold over an H x W plane: kernel, dilation,
  -- padding and stride as (h, w) pairs, the blocks' count (oh, ow), and the flat
  -- positions in the padded plane (Hp x Wp) of each block element, as an int64
  -- tensor [kh*kw*oh*ow] (kernel offset major, block minor) on x's device.
  local function blocks(name, x, H, W, kernel_size, opts)
    opts = options(opts, name, { dilation = true, padding = true, stride = true })
    local kh, kw = pair(kernel_size, name, "kernel_size")
    local dh, dw = pair(opts.dilation, name, "dilation", 1)
    local ph, pw = pair(opts.padding, name, "padding", 0)
    local sh, sw = pair(opts.stride, name, "stride", 1)
    for _, v in ipairs { { kh, "kernel_size" }, { kw, "kernel_size" }, { dh, "dilation" }, { dw, "dilation" },
                         { sh, "stride" }, { sw, "stride" } } do
      positive(v[1], name, v[2])
    end
    if ph < 0 or pw < 0 then fail(string.format("%s: padding must be non-negative, got %d, %d", name, ph, pw)) end
    local Hp, Wp = H + 2 * ph, W + 2 * pw
    local oh, ow = floor((Hp - dh * (kh - 1) - 1) / sh) + 1, floor((Wp - dw * (kw - 1) - 1) / sw) + 1
    if oh < 1 or ow < 1 then
      fail(string.format("%s: a %dx%d kernel (dilation %d, %d) does not fit the padded %dx%d input", name, kh, kw,
        dh, dw, Hp, Wp))
    end
    local o = { dtype = "int64", device = x:device() }
    local rows = tide.arange(0, kh, o):mul(dh):view(kh, 1, 1, 1) + tide.arange(0, oh, o):mul(sh):view(1, 1, oh, 1)
    local cols = tide.arange(0, kw, o):mul(dw):view(1, kw, 1, 1) + tide.arange(0, ow, o):mul(sw):view(1, 1, 1, ow)
    local at = (rows:mul(Wp) + cols):reshape(-1):add(1)   -- 1-based, [kh, kw, oh, ow] flattened
    return { kh = kh, kw = kw, ph = ph, pw = pw, Hp = Hp, Wp = Wp, L = oh * ow, at = at }
  end

  --- F.unfold(x, kernel_size, {dilation=1, padding=0, stride=1}): the sliding
  -- blocks of x [N, C, H, W] (or [C, H, W]) as columns [N, C*kh*kw, L], as
  -- torch.nn.functional.unfold (im2col); the elements are gathered, not
  -- computed, so they are x's exactly. Differentiable (the gradient is fold).
  -- @usage local patches = F.unfold(img, 16, { stride = 16 })   -- ViT patches
  function F.unfold(x, kernel_size, opts)
    need_tensor(x, "unfold", "input")
    if x:dim() ~= 3 and x:dim() ~= 4 then
      fail(string.format("unfold: expects a 3-d (C, H, W) or 4-d (N, C, H, W) input, got %d-d", x:dim()))
    end
    local x4 = x:dim() == 3 and x:unsqueeze(1) or x
    local N, C, H, W = x4:size(1), x4:size(2), x4:size(3), x4:size(4)
    local b = blocks("unfold", x4, H, W, kernel_size, opts)
    if b.ph > 0 or b.pw > 0 then x4 = F.pad(x4, { b.pw, b.pw, b.ph, b.ph }) end
    local cols = x4:reshape(N, C, b.Hp * b.Wp):index_select(3, b.at):view(N, C * b.kh * b.kw, b.L)
    return x:dim() == 3 and cols:squeeze(1) or cols
  end

  --- F.fold(cols, output_size, kernel_size, {dilation=1, padding=0, stride=1}): the
  -- inverse arrangement of unfold, summing where blocks overlap: cols
  -- [N, C*kh*kw, L] (or [C*kh*kw, L]) into [N, C, H, W], as torch.nn.functional.fold.
  -- @usage local img = F.fold(cols, { 28, 28 }, 3, { padding = 1 })
  function F.fold(cols, output_size, kernel_size, opts)
    need_tensor(cols, "fold", "input")
    if cols:dim() ~= 2 and cols:dim() ~= 3 then
      fail(string.format("fold: expects a 2-d (C*kh*kw, L) or 3-d (N, C*kh*kw, L) input, got %d-d", cols:dim()))
    end
    local c3 = cols:dim() == 2 and cols:unsqueeze(1) or cols
    local H, W = pair(output_size, "fold", "output_size")
    positive(H, "fold", "output_size"); positive(W, "fold", "output_size")
    local b = blocks("fold", c3, H, W, kernel_size, opts)
    local N, K, L = c3:size(1), c3:size(2), c3:size(3)
    if K % (b.kh * b.kw) ~= 0 then
      fail(string.format("fold: the input's size %d in dimension 2 is not divisible by the kernel's %d elements",
        K, b.kh * b.kw))
    end
    if L ~= b.L then
      fail(string.format("fold: the input has %d blocks but output_size %dx%d with this kernel, padding and " ..
        "stride makes %d", L, H, W, b.L))
    end
    local C = K / (b.kh * b.kw)
    local plane = tide.zeros({ N, C, b.Hp * b.Wp }, on(c3)):index_add(3, b.at, c3:reshape(N, C, b.kh * b.kw * L))
    local y = plane:view(N, C, b.Hp, b.Wp)
    if b.ph > 0 or b.pw > 0 then y = y:narrow(3, b.ph + 1, H):narrow(4, b.pw + 1, W) end
    return cols:dim() == 2 and y:squeeze(1) or y
  end

  --- nn.Unfold(kernel_size, opts) and nn.Fold(output_size, kernel_size, opts).
  local Unfold = Module:extend("Unfold")
  function Unfold:init(kernel_size, opts) self.kernel_size, self.opts = kernel_size, opts or {} end
  function Unfold:forward(x) return F.unfold(x, self.kernel_size, self.opts) end
  function Unfold:extra_repr() return "kernel_size=" .. tostring(type(self.kernel_size) == "table" and
    table.concat(self.kernel_size, ", ") or self.kernel_size) end
  nn.Unfold = Unfold
  local Fold = Module:extend("Fold")
  function Fold:init(output_size, kernel_size, opts)
    self.output_size, self.kernel_size, self.opts = output_size, kernel_size, opts or {}
  end
  function Fold:forward(x) return F.fold(x, self.output_size, self.kernel_size, self.opts) end
  nn.Fold = Fold
end
