--- tide.nn's 3-d layers, as torch.nn has them: conv3d and conv_transpose3d,
-- max, average and adaptive pooling over D, H, W, BatchNorm3d, InstanceNorm3d,
-- and F.interpolate on 5-d input (nearest, trilinear, area). Each is composed
-- on the 2-d ops with the depth folded into the batch or the channels, so it is
-- differentiable and runs on every device without kernels of its own; the
-- depth windows are tables built from shapes alone (no host reads).
local tide = require "tide"
local B = require "bindings.ffi"
local args = require "tide.args"
local helpers = require "tide.nn.helpers"
local fail = B.fail
local is_tensor = tide.is_tensor
local floor, ceil, max, min = math.floor, math.ceil, math.max, math.min

return function(nn)
  local F, Module, init = nn.functional, nn.Module, nn.init

  -- -- helpers ---------------------------------------------------------------------

  local shape_str, is_int, need_tensor, need_float = args.shape_str, args.is_int, args.need_tensor, args.need_float
  local options, need_bool, positive, list_str = args.options, args.need_bool, args.positive, args.list_str
  local on = helpers.on

  -- {d, h, w} of an integer or a table of 3 integers (v nil: default), each at least lo.
  local function triple(v, name, what, default, lo) return helpers.sizes(v, 3, name, what, default, lo) end

  -- Runs f on a 5-d x, or on a 4-d x as a batch of one (the results lose that dim again).
  local function with_batch(name, x, f) return helpers.with_batch(name, x, 5, "C, D, H, W", f) end

  -- Python's repr of a size: 3, or (3, 3, 3) for a table.
  local function tuple(v)
    if type(v) ~= "table" then return tostring(v) end
    local s = {}
    for i = 1, #v do s[i] = tostring(v[i]) end
    return "(" .. table.concat(s, ", ") .. ")"
  end

  -- The values of a table t[i][k] as a flat tensor (options o), each f(v).
  local function flat_tensor(t, o, f)
    local flat = {}
    for i = 1, #t do
      for k = 1, #t[i] do flat[#flat + 1] = f(t[i][k]) end
    end
    return tide.tensor(flat, o)
  end

  -- The depth slices y [N, C, D, h, w] at windows pos ([Do][K], 0-based) as [N, C, Do, K, h, w].
  local function gather_depth(y, pos)
    local n, c, h, w = y:size(1), y:size(2), y:size(4), y:size(5)
    local at = flat_tensor(pos, { dtype = "int64", device = y:device() }, function(v) return v + 1 end)
    return y:index_select(3, at):view(n, c, #pos, #pos[1], h, w)
  end

  -- True when the windows pos are the slices 0 .. D-1 one by one (nothing to combine).
  local function is_identity(pos, D)
    if #pos ~= D or #pos[1] ~= 1 then return false end
    for i = 1, D do if pos[i][1] ~= i - 1 then return false end end
    return true
  end

  -- The weighted sums over depth windows of y [N, C, D, h, w]: pos and wts [Do][K].
  local function depth_sum(y, pos, wts)
    if is_identity(pos, y:size(3)) then
      local ones = true
      for i = 1, #wts do ones = ones and wts[i][1] == 1 end
      if ones then return y end
    end
    local wt = flat_tensor(wts, on(y), function(v) return v end):view(1, 1, #pos, #pos[1], 1, 1)
    return (gather_depth(y, pos) * wt):sum(4)
  end

  -- The maxima over depth windows of y [N, C, D, h, w] and, with idx (the 2-d
  -- pool's 1-based positions in each h x w input plane), their 1-based
  -- positions in the input's D x H x W volume (plane = H W). A window with no
  -- position (pos[i] == false) gives -inf and index 0, as the 2-d op's empty windows.
  local function depth_max(y, idx, pos, plane)
    local D = y:size(3)
    local empty = false
    for i = 1, #pos do if not pos[i] then empty = true end end
    if empty then
      local K = 1
      for i = 1, #pos do if pos[i] then K = #pos[i] end end
      for i = 1, #pos do
        if not pos[i] then
          pos[i] = {}
          for k = 1, K do pos[i][k] = D end   -- the -inf slice appended below
        end
      end
      local s = y:shape()
      s[3] = 1
      y = tide.cat({ y, tide.full(s, -math.huge, on(y)) }, 3)
      if idx then idx = tide.cat({ idx, tide.zeros(s, on(idx)) }, 3) end
    end
    if not idx and is_identity(pos, D) then return y end
    local v, k = gather_depth(y, pos):max(4)
    if not idx then return v end
    local base = flat_tensor(pos, on(idx), function(at) return at * plane end):view(1, 1, #pos, #pos[1], 1, 1)
    local at = gather_depth(idx, pos)
    at = (at + base) * at:gt(0):to("int64")   -- an empty window (index 0) stays 0
    return v, at:gather(4, k:unsqueeze(4)):squeeze(4)
  end

  -- PyTorch's pooled size of n (kernel k, stride s, padding p, dilation d).
  local function pool_size(n, k, s, p, d, ceil_mode)
    local o = floor((n + 2 * p - d * (k - 1) - 1 + (ceil_mode and s - 1 or 0)) / s) + 1
    if ceil_mode and (o - 1) * s >= n + p then o = o - 1 end
    return o
  end

  -- -- convolution -----------------------------------------------------------------------

  local CONV_OPTS = { stride = true, padding = true, dilation = true, groups = true }

  -- A floating-point x, and a weight and bias of its dtype (checked here so
  -- that conv2d's own checks never speak for a 3-d call).
  local function need_dtypes(name, x, weight, bias)
    need_float(x, name, "input")
    for _, t in ipairs { { weight, "weight" }, { bias, "bias" } } do
      if t[1] ~= nil and t[1]:dtype() ~= x:dtype() then
        fail(string.format("%s: %s has dtype %s but input has dtype %s", name, t[2], t[1]:dtype(), x:dtype()))
      end
    end
  end

  -- The padding before and after each of D, H, W: from an integer, {d, h, w},
  -- "valid", or "same" (stride 1; an odd total pads the end one more, as PyTorch).
  local function conv_padding(name, p, k, s, d)
    if p == "same" then
      if s[1] ~= 1 or s[2] ~= 1 or s[3] ~= 1 then
        fail(string.format("%s: padding='same' needs stride 1, got %s", name, list_str(s)))
      end
      local lo, hi = {}, {}
      for i = 1, 3 do
        local total = d[i] * (k[i] - 1)
        lo[i], hi[i] = floor(total / 2), total - floor(total / 2)
      end
      return lo, hi
    end
    if p == "valid" then return { 0, 0, 0 }, { 0, 0, 0 } end
    local v = triple(p, name, "padding", 0, 0)
    return v, v
  end

  -- conv3d of a 5-d x: each output depth's kD input slices (zero-padded in depth)
  -- become channels of one image of a batch of N Do, so one conv2d with the
  -- weight's depth taps as input channels computes it (channels ordered
  -- group, tap, channel, so groups stay contiguous).
  local function conv3d(name, x, weight, bias, opts)
    local groups = helpers.conv_groups(name, x, weight, bias, opts)
    local N, C, D, H, W = x:size(1), x:size(2), x:size(3), x:size(4), x:size(5)
    local O, Cg = weight:size(1), weight:size(2)
    local k = { weight:size(3), weight:size(4), weight:size(5) }
    need_dtypes(name, x, weight, bias)
    local s = triple(opts.stride, name, "stride", 1, 1)
    local d = triple(opts.dilation, name, "dilation", 1, 1)
    local lo, hi = conv_padding(name, opts.padding, k, s, d)
    local ins, outs = { D, H, W }, {}
    for i = 1, 3 do
      outs[i] = floor((ins[i] + lo[i] + hi[i] - d[i] * (k[i] - 1) - 1) / s[i]) + 1
      if outs[i] < 1 then
        fail(string.format("%s: kernel %s (dilation %s) is larger than the padded input %s (input %s, padding %s)",
          name, list_str(k), list_str(d), list_str { D + lo[1] + hi[1], H + lo[2] + hi[2], W + lo[3] + hi[3] },
          shape_str(x), list_str(lo)))
      end
    end
    if hi[2] ~= lo[2] or hi[3] ~= lo[3] then   -- "same" with an odd total: conv2d pads evenly, F.pad the rest
      x = F.pad(x, { 0, hi[3] - lo[3], 0, hi[2] - lo[2] })
    end
    local G, Do, kD = groups, outs[1], k[1]
    -- [N, D, G, C/G, H, W], padded in depth, then the slices each output depth reads
    local xt = x:reshape(N, G, Cg, D, x:size(4), x:size(5)):permute(1, 4, 2, 3, 5, 6)
    if lo[1] > 0 or hi[1] > 0 then xt = F.pad(xt, { 0, 0, 0, 0, 0, 0, 0, 0, lo[1], hi[1] }) end
    if kD > 1 or s[1] > 1 then
      local o = { dtype = "int64", device = x:device() }
      local at = tide.arange(0, Do, o):mul(s[1]):view(Do, 1) + tide.arange(0, kD, o):mul(d[1]):view(1, kD)
      xt = xt:index_select(2, at:reshape(Do * kD):add(1))
    end
    xt = xt:reshape(N, Do, kD, G, Cg, xt:size(5), xt:size(6))
    if G > 1 and kD > 1 then xt = xt:transpose(3, 4) end
    xt = xt:reshape(N * Do, G * kD * Cg, xt:size(6), xt:size(7))
    local w2 = weight:permute(1, 3, 2, 4, 5):reshape(O, kD * Cg, k[2], k[3])
    local y = F.conv2d(xt, w2, bias, { stride = { s[2], s[3] }, padding = { lo[2], lo[3] },
      dilation = { d[2], d[3] }, groups = G })
    return y:view(N, Do, O, outs[2], outs[3]):transpose(2, 3):contiguous()
  end

  --- F.conv3d(x, weight, bias, {stride=1, padding=0, dilation=1, groups=1}): 3-d
  -- cross-correlation, as torch.nn.functional.conv3d. Composed on conv2d: the
  -- kD depth slices each output depth reads are stacked as channels of one
  -- image of a batch of N Do (kD copies of the input), convolved by the weight
  -- with its depth taps as input channels.
  -- @param x [N, C, D, H, W] or [C, D, H, W]
  -- @param weight [O, C/groups, kD, kH, kW]
  -- @param bias [O] or nil
  -- @param opts each option an integer or {d, h, w}; padding also "valid" or
  -- "same" (stride 1; an odd total pads the end one more, as PyTorch)
  -- @return [N, O, oD, oH, oW], oD = floor((D + 2 padding - dilation (kD - 1) - 1) / stride) + 1
  -- @usage local y = F.conv3d(x, w, b, { padding = 1 })
  function F.conv3d(x, weight, bias, opts)
    opts = options(opts, "conv3d", CONV_OPTS)
    need_tensor(weight, "conv3d", "weight")
    if weight:dim() ~= 5 then
      fail(string.format("conv3d: weight must be 5-d [out_channels, in_channels/groups, kD, kH, kW], got %s",
        shape_str(weight)))
    end
    return (with_batch("conv3d", x, function(x5) return conv3d("conv3d", x5, weight, bias, opts) end))
  end

  -- -- transposed convolution ------------------------------------------------------------

  local CONVT_OPTS = { stride = true, padding = true, output_padding = true, dilation = true, groups = true }

  -- conv_transpose3d of a 5-d x: each input depth slice through conv_transpose2d
  -- with the weight's depth taps as extra output channels, then each (slice,
  -- tap) added at output depth slice * stride + tap * dilation - padding.
  local function conv_transpose3d(name, x, weight, bias, opts)
    local groups = helpers.conv_transpose_groups(name, x, weight, bias, opts)
    local N, Cin, D, H, W = x:size(1), x:size(2), x:size(3), x:size(4), x:size(5)
    local Og = weight:size(2)
    local k = { weight:size(3), weight:size(4), weight:size(5) }
    local O = Og * groups
    need_dtypes(name, x, weight, bias)
    local s = triple(opts.stride, name, "stride", 1, 1)
    local p = triple(opts.padding, name, "padding", 0, 0)
    local op = triple(opts.output_padding, name, "output_padding", 0, 0)
    local d = triple(opts.dilation, name, "dilation", 1, 1)
    for i = 1, 3 do
      if op[i] >= s[i] and op[i] >= d[i] then
        fail(string.format("%s: output_padding %s must be below either stride %s or dilation %s", name,
          list_str(op), list_str(s), list_str(d)))
      end
    end
    local ins, outs = { D, H, W }, {}
    for i = 1, 3 do outs[i] = (ins[i] - 1) * s[i] - 2 * p[i] + d[i] * (k[i] - 1) + op[i] + 1 end
    if D < 1 or H < 1 or W < 1 or outs[1] < 1 or outs[2] < 1 or outs[3] < 1 then
      fail(string.format("%s: input %s with weight %s gives an output of %dx%dx%d", name, shape_str(x),
        shape_str(weight), outs[1], outs[2], outs[3]))
    end
    local G, kD, Do, hw = groups, k[1], outs[1], outs[2] * outs[3]
    local w2 = weight:reshape(Cin, Og, kD, k[2], k[3]):transpose(2, 3):reshape(Cin, kD * Og, k[2], k[3])
    local z = F.conv_transpose2d(x:transpose(2, 3):reshape(N * D, Cin, H, W), w2, nil,
      { stride = { s[2], s[3] }, padding = { p[2], p[3] }, output_padding = { op[2], op[3] },
        dilation = { d[2], d[3] }, groups = G })
    -- [N, D kD, O hw], each row added at its output depth in the uncropped length L
    z = z:view(N, D, G, kD, Og * hw)
    if G > 1 and kD > 1 then z = z:transpose(3, 4) end
    z = z:reshape(N, D * kD, O * hw)
    local L = (D - 1) * s[1] + d[1] * (kD - 1) + 1 + op[1]
    local y
    if kD == 1 and s[1] == 1 and op[1] == 0 then
      y = z
    else
      local o = { dtype = "int64", device = x:device() }
      local at = tide.arange(0, D, o):mul(s[1]):view(D, 1) + tide.arange(0, kD, o):mul(d[1]):view(1, kD)
      y = tide.zeros({ N, L, O * hw }, on(z)):index_add(2, at:reshape(D * kD):add(1), z)
    end
    if p[1] > 0 then y = y:narrow(2, p[1] + 1, Do) end
    y = y:reshape(N, Do, O, outs[2], outs[3]):transpose(2, 3)
    if bias ~= nil then return y + bias:view(1, O, 1, 1, 1) end
    return y:contiguous()
  end

  --- F.conv_transpose3d(x, weight, bias, {stride=1, padding=0, output_padding=0,
  -- groups=1, dilation=1}): the transposed 3-d convolution (the gradient of
  -- conv3d with respect to its input), as torch.nn.functional.conv_transpose3d.
  -- Composed on conv_transpose2d over each depth slice, the weight's depth taps
  -- as output channels, added into the output depths with index_add.
  -- @param x [N, C_in, D, H, W] or [C_in, D, H, W]
  -- @param weight [C_in, C_out/groups, kD, kH, kW]
  -- @param bias [C_out] or nil
  -- @param opts each option an integer or {d, h, w}; output_padding below stride or dilation
  -- @return [N, C_out, oD, oH, oW], oD = (D - 1) stride - 2 padding + dilation (kD - 1) + output_padding + 1
  -- @usage local y = F.conv_transpose3d(x, w, nil, { stride = 2, padding = 1, output_padding = 1 })
  function F.conv_transpose3d(x, weight, bias, opts)
    local name = "conv_transpose3d"
    opts = options(opts, name, CONVT_OPTS)
    need_tensor(weight, name, "weight")
    if weight:dim() ~= 5 then
      fail(string.format("%s: weight must be 5-d [in_channels, out_channels/groups, kD, kH, kW], got %s", name,
        shape_str(weight)))
    end
    return (with_batch(name, x, function(x5) return conv_transpose3d(name, x5, weight, bias, opts) end))
  end

  -- -- convolution layers ------------------------------------------------------------------

  local function conv_init(self, cname, transposed, in_channels, out_channels, kernel_size, opts)
    helpers.conv_init(self, cname, transposed, in_channels, out_channels, function()
      return triple(kernel_size, cname, "kernel_size", nil, 1)
    end, opts)
  end

  -- v as PyTorch prints a module's size: always a tuple of 3.
  local function tuple3(v) return tuple(type(v) == "table" and v or { v, v, v }) end
  local function all_are(v, x) return v == x or (type(v) == "table" and v[1] == x and v[2] == x and v[3] == x) end

  local function conv_repr(self)
    local s = string.format("%d, %d, kernel_size=%s, stride=%s", self.in_channels, self.out_channels,
      tuple3(self.kernel_size), tuple3(self.stride))
    local p = self.padding
    if type(p) == "string" then s = s .. ", padding=" .. p
    elseif not all_are(p, 0) then s = s .. ", padding=" .. tuple3(p) end
    if not all_are(self.dilation, 1) then s = s .. ", dilation=" .. tuple3(self.dilation) end
    local op = self.output_padding
    if op and not all_are(op, 0) then s = s .. ", output_padding=" .. tuple3(op) end
    if self.groups ~= 1 then s = s .. ", groups=" .. self.groups end
    if self.bias == nil then s = s .. ", bias=false" end
    if self.padding_mode ~= "zeros" then s = s .. ", padding_mode=" .. self.padding_mode end
    return s
  end

  --- nn.Conv3d(in_channels, out_channels, kernel_size, opts): a 3-d convolution
  -- layer, as torch.nn.Conv3d; opts {stride=1, padding=0 (or "valid", "same"),
  -- dilation=1, groups=1, bias=true, padding_mode="zeros" (or "reflect",
  -- "replicate", "circular": F.pad first), dtype, device}, each size an integer
  -- or {d, h, w}. weight [out, in/groups, kD, kH, kW] and bias [out] are
  -- initialised as PyTorch does (Kaiming-uniform, a = sqrt(5)).
  -- @usage local conv = nn.Conv3d(1, 16, 3, { padding = 1 })
  local Conv3d = Module:extend("Conv3d")
  function Conv3d:init(in_channels, out_channels, kernel_size, opts)
    conv_init(self, "Conv3d", false, in_channels, out_channels, kernel_size, opts)
  end
  --- Draws the weight and bias again, as at creation.
  function Conv3d:reset_parameters() init.reset_linear_(self.weight, self.bias) end
  function Conv3d:forward(x)
    local o = { stride = self.stride, padding = self.padding, dilation = self.dilation, groups = self.groups }
    if self.padding_mode ~= "zeros" then
      local p = triple(self.padding, "Conv3d", "padding", 0, 0)
      x = F.pad(x, { p[3], p[3], p[2], p[2], p[1], p[1] }, self.padding_mode)
      o.padding = 0
    end
    return F.conv3d(x, self.weight, self.bias, o)
  end
  function Conv3d:extra_repr() return conv_repr(self) end
  nn.Conv3d = Conv3d

  --- nn.ConvTranspose3d(in_channels, out_channels, kernel_size, opts): a
  -- transposed 3-d convolution layer, as torch.nn.ConvTranspose3d; opts
  -- {stride=1, padding=0, output_padding=0, groups=1, bias=true, dilation=1,
  -- dtype, device}. weight [in, out/groups, kD, kH, kW] and bias [out] are
  -- initialised as PyTorch does (fan_in = out/groups kD kH kW).
  -- forward(x, output_size) picks the output_padding that gives output_size ({d, h, w}).
  -- @usage local up = nn.ConvTranspose3d(16, 8, 2, { stride = 2 })
  local ConvTranspose3d = Module:extend("ConvTranspose3d")
  function ConvTranspose3d:init(in_channels, out_channels, kernel_size, opts)
    conv_init(self, "ConvTranspose3d", true, in_channels, out_channels, kernel_size, opts)
  end
  --- Draws the weight and bias again, as at creation.
  function ConvTranspose3d:reset_parameters() init.reset_linear_(self.weight, self.bias) end
  function ConvTranspose3d:forward(x, output_size)
    local cname = "ConvTranspose3d"
    local op = self.output_padding
    if output_size ~= nil then
      need_tensor(x, cname, "input")
      local size = type(output_size) == "table" and output_size or { output_size }
      if #size ~= 3 and #size ~= 4 and #size ~= 5 then
        fail(string.format("%s: output_size must have 3 sizes, got %d", cname, #size))
      end
      local s = triple(self.stride, cname, "stride", 1, 1)
      local p = triple(self.padding, cname, "padding", 0, 0)
      local d = triple(self.dilation, cname, "dilation", 1, 1)
      op = {}
      for i = 1, 3 do
        local len = x:size(x:dim() - 3 + i)
        local least = (len - 1) * s[i] - 2 * p[i] + d[i] * (self.kernel_size[i] - 1) + 1
        op[i] = size[#size - 3 + i] - least
        if op[i] < 0 or op[i] >= s[i] then
          fail(string.format("%s: output_size %s is not reachable: dimension %d can be %d to %d", cname,
            tuple(size), i, least, least + s[i] - 1))
        end
      end
    end
    return F.conv_transpose3d(x, self.weight, self.bias, { stride = self.stride, padding = self.padding,
      output_padding = op, dilation = self.dilation, groups = self.groups })
  end
  function ConvTranspose3d:extra_repr() return conv_repr(self) end
  nn.ConvTranspose3d = ConvTranspose3d

  -- -- pooling ------------------------------------------------------------------------------

  local MAX_OPTS = { stride = true, padding = true, dilation = true, ceil_mode = true, return_indices = true }
  local AVG_OPTS = { stride = true, padding = true, ceil_mode = true, count_include_pad = true,
                     divisor_override = true }

  -- Kernel, stride, padding (at most half the kernel) and dilation of a 3-d
  -- pool, and the output sizes of x [N, C, D, H, W].
  local function pool_geometry(name, x, kernel, opts, ceil_mode)
    local k = triple(kernel, name, "kernel_size", nil, 1)
    local s = triple(opts.stride, name, "stride", k, 1)
    local p = triple(opts.padding, name, "padding", 0, 0)
    local d = triple(opts.dilation, name, "dilation", 1, 1)
    for i = 1, 3 do
      if 2 * p[i] > k[i] then
        fail(string.format("%s: padding %s must be at most half of kernel_size %s", name, list_str(p), list_str(k)))
      end
    end
    local o = {}
    for i = 1, 3 do
      o[i] = pool_size(x:size(2 + i), k[i], s[i], p[i], d[i], ceil_mode)
      if o[i] < 1 then
        fail(string.format("%s: input %s with kernel_size %s, stride %s, padding %s and dilation %s gives an empty output",
          name, shape_str(x), list_str(k), list_str(s), list_str(p), list_str(d)))
      end
    end
    return k, s, p, d, o
  end

  -- x [N, C, D, H, W] as [N, C D, H, W], and the 2-d result [N, C D, h, w] back as [N, C, D, h, w].
  local function planes(x) return x:reshape(x:size(1), x:size(2) * x:size(3), x:size(4), x:size(5)) end
  local function volume(y, x) return y:view(x:size(1), x:size(2), x:size(3), y:size(3), y:size(4)) end

  --- F.max_pool3d(x, kernel, {stride=kernel, padding=0, dilation=1, ceil_mode=false,
  -- return_indices=false}): the maxima of each window, as torch.nn.functional.max_pool3d,
  -- and with return_indices their 1-based positions in each flattened D x H x W
  -- input volume. max_pool2d over each depth slice, then the maximum over the depth window.
  -- @param x [N, C, D, H, W] or [C, D, H, W]
  -- @param kernel an integer or {kD, kH, kW}
  -- @return [N, C, oD, oH, oW] (and int64 indices of that shape)
  -- @usage local y = F.max_pool3d(x, 2)
  function F.max_pool3d(x, kernel, opts)
    local name = "max_pool3d"
    opts = options(opts, name, MAX_OPTS)
    local ceil_mode = need_bool(opts.ceil_mode, name, "ceil_mode")
    local want_idx = need_bool(opts.return_indices, name, "return_indices")
    local y, idx = with_batch(name, x, function(x5)
      need_float(x5, name, "input")
      local k, s, p, d, o = pool_geometry(name, x5, kernel, opts, ceil_mode)
      local D = x5:size(3)
      local y2, i2 = F.max_pool2d(planes(x5), { k[2], k[3] }, { stride = { s[2], s[3] }, padding = { p[2], p[3] },
        dilation = { d[2], d[3] }, ceil_mode = ceil_mode, return_indices = want_idx })
      -- each window's positions in 0 .. D-1, those in the padding replaced by
      -- the window's first (which leaves its maximum and first maximum alone)
      local pos = {}
      for i = 1, o[1] do
        local w, first = {}, nil
        for j = 1, k[1] do
          local at = (i - 1) * s[1] - p[1] + (j - 1) * d[1]
          if at >= 0 and at < D then first = first or at; w[j] = at end
        end
        for j = 1, k[1] do w[j] = w[j] or first end
        pos[i] = first ~= nil and w
      end
      return depth_max(volume(y2, x5), i2 and volume(i2, x5), pos, x5:size(4) * x5:size(5))
    end)
    if want_idx then return y, idx end
    return y
  end

  --- F.avg_pool3d(x, kernel, {stride=kernel, padding=0, ceil_mode=false,
  -- count_include_pad=true, divisor_override=nil}): as torch.nn.functional.avg_pool3d.
  -- avg_pool2d over each depth slice, then the depth window's weighted sum (the
  -- divisor is a product of one count per dim, so it splits the same way).
  -- @param x [N, C, D, H, W] or [C, D, H, W]
  -- @param kernel an integer or {kD, kH, kW}
  -- @return [N, C, oD, oH, oW]
  -- @usage local y = F.avg_pool3d(x, 3, { stride = 2, padding = 1 })
  function F.avg_pool3d(x, kernel, opts)
    local name = "avg_pool3d"
    opts = options(opts, name, AVG_OPTS)
    local ceil_mode = need_bool(opts.ceil_mode, name, "ceil_mode")
    local include_pad = opts.count_include_pad ~= false
    need_bool(opts.count_include_pad, name, "count_include_pad")
    local div = opts.divisor_override
    if div ~= nil and (not is_int(div) or div == 0) then
      fail(string.format("%s: divisor_override must be a nonzero integer, got %s", name, tostring(div)))
    end
    return (with_batch(name, x, function(x5)
      need_float(x5, name, "input")
      local k, s, p, _, o = pool_geometry(name, x5, kernel, { stride = opts.stride, padding = opts.padding },
        ceil_mode)
      local D = x5:size(3)
      local y2 = F.avg_pool2d(planes(x5), { k[2], k[3] }, { stride = { s[2], s[3] }, padding = { p[2], p[3] },
        ceil_mode = ceil_mode, count_include_pad = include_pad, divisor_override = div and 1 or nil })
      local pos, wts = {}, {}
      for i = 1, o[1] do
        local start = (i - 1) * s[1] - p[1]
        local lo, hi = max(start, 0), min(start + k[1], D)   -- the window's input slices [lo, hi)
        local count = div or (include_pad and min(start + k[1], D + p[1]) - start or hi - lo)
        pos[i], wts[i] = {}, {}
        for j = 1, k[1] do
          local at = start + j - 1
          local inside = at >= lo and at < hi
          pos[i][j], wts[i][j] = inside and at or lo, inside and 1 / count or 0
        end
      end
      return depth_sum(volume(y2, x5), pos, wts)
    end))
  end

  -- PyTorch's adaptive windows of n elements into m: window i (0-based) spans
  -- [floor(i n / m), ceil((i + 1) n / m)); positions pos[m][K] (K the longest
  -- window; shorter ones repeat their last) and the averaging weights.
  local function adaptive_windows(n, m)
    local K = 0
    for i = 0, m - 1 do K = max(K, ceil((i + 1) * n / m) - floor(i * n / m)) end
    local pos, wts = {}, {}
    for i = 0, m - 1 do
      local a, b = floor(i * n / m), ceil((i + 1) * n / m)
      pos[i + 1], wts[i + 1] = {}, {}
      for j = 0, K - 1 do
        pos[i + 1][j + 1], wts[i + 1][j + 1] = min(a + j, b - 1), a + j < b and 1 / (b - a) or 0
      end
    end
    return pos, wts
  end

  --- F.adaptive_avg_pool3d(x, output_size): averages over windows that tile
  -- D, H and W into output_size (an integer or {d, h, w}), as
  -- torch.nn.functional.adaptive_avg_pool3d: adaptive_avg_pool2d over each
  -- depth slice, then the average over each depth window.
  -- @param x [N, C, D, H, W] or [C, D, H, W]
  -- @return [N, C, d, h, w]
  -- @usage local y = F.adaptive_avg_pool3d(x, 1)   -- global average pooling
  function F.adaptive_avg_pool3d(x, output_size)
    local name = "adaptive_avg_pool3d"
    local o = triple(output_size, name, "output_size", nil, 1)
    return (with_batch(name, x, function(x5)
      need_float(x5, name, "input")
      helpers.need_spatial(name, x5, 3)
      local y2 = F.adaptive_avg_pool2d(planes(x5), { o[2], o[3] })
      return depth_sum(volume(y2, x5), adaptive_windows(x5:size(3), o[1]))
    end))
  end

  --- F.adaptive_max_pool3d(x, output_size, return_indices): the maxima of the
  -- adaptive windows (as adaptive_avg_pool3d's), as
  -- torch.nn.functional.adaptive_max_pool3d; with return_indices also their
  -- 1-based positions in each flattened D x H x W input volume.
  -- @param x [N, C, D, H, W] or [C, D, H, W]
  -- @param output_size an integer or {d, h, w}
  -- @param return_indices a boolean, or {return_indices = b}
  -- @return [N, C, d, h, w] (and int64 indices of that shape)
  -- @usage local y, idx = F.adaptive_max_pool3d(x, { 2, 4, 4 }, true)
  function F.adaptive_max_pool3d(x, output_size, return_indices)
    local name = "adaptive_max_pool3d"
    local o = triple(output_size, name, "output_size", nil, 1)
    local want_idx = helpers.indices_flag(return_indices, name)
    local y, idx = with_batch(name, x, function(x5)
      need_float(x5, name, "input")
      helpers.need_spatial(name, x5, 3)
      local y2, i2 = F.adaptive_max_pool2d(planes(x5), { o[2], o[3] }, want_idx)
      local pos = adaptive_windows(x5:size(3), o[1])
      return depth_max(volume(y2, x5), i2 and volume(i2, x5), pos, x5:size(4) * x5:size(5))
    end)
    if want_idx then return y, idx end
    return y
  end

  --- nn.MaxPool3d(kernel_size, opts): opts {stride=kernel_size, padding=0, dilation=1,
  -- ceil_mode=false, return_indices=false}.
  -- @usage local pool = nn.MaxPool3d(2)
  local MaxPool3d = Module:extend("MaxPool3d")
  function MaxPool3d:init(kernel_size, opts)
    self.kernel_size, self.opts = kernel_size, options(opts, "MaxPool3d", MAX_OPTS)
  end
  function MaxPool3d:forward(x) return F.max_pool3d(x, self.kernel_size, self.opts) end
  function MaxPool3d:extra_repr()
    local o = self.opts
    return string.format("kernel_size=%s, stride=%s, padding=%s, dilation=%s, ceil_mode=%s", tuple(self.kernel_size),
      tuple(o.stride or self.kernel_size), tuple(o.padding or 0), tuple(o.dilation or 1), tostring(o.ceil_mode == true))
  end
  nn.MaxPool3d = MaxPool3d

  --- nn.AvgPool3d(kernel_size, opts): opts {stride=kernel_size, padding=0,
  -- ceil_mode=false, count_include_pad=true, divisor_override=nil}.
  -- @usage local pool = nn.AvgPool3d(2)
  local AvgPool3d = Module:extend("AvgPool3d")
  function AvgPool3d:init(kernel_size, opts)
    self.kernel_size, self.opts = kernel_size, options(opts, "AvgPool3d", AVG_OPTS)
  end
  function AvgPool3d:forward(x) return F.avg_pool3d(x, self.kernel_size, self.opts) end
  function AvgPool3d:extra_repr()
    local o = self.opts
    return string.format("kernel_size=%s, stride=%s, padding=%s", tuple(self.kernel_size),
      tuple(o.stride or self.kernel_size), tuple(o.padding or 0))
  end
  nn.AvgPool3d = AvgPool3d

  --- nn.AdaptiveAvgPool3d(output_size): output_size an integer or {d, h, w}.
  -- @usage local gap = nn.AdaptiveAvgPool3d(1)
  local AdaptiveAvgPool3d = Module:extend("AdaptiveAvgPool3d")
  function AdaptiveAvgPool3d:init(output_size)
    self.output_size = output_size
    triple(output_size, "AdaptiveAvgPool3d", "output_size", nil, 1)
  end
  function AdaptiveAvgPool3d:forward(x) return F.adaptive_avg_pool3d(x, self.output_size) end
  function AdaptiveAvgPool3d:extra_repr() return "output_size=" .. tuple(self.output_size) end
  nn.AdaptiveAvgPool3d = AdaptiveAvgPool3d

  --- nn.AdaptiveMaxPool3d(output_size, return_indices): F.adaptive_max_pool3d as a
  -- module (with return_indices, forward returns the maxima and their indices).
  -- @usage local pool = nn.AdaptiveMaxPool3d({ 2, 5, 5 })
  local AdaptiveMaxPool3d = Module:extend("AdaptiveMaxPool3d")
  function AdaptiveMaxPool3d:init(output_size, return_indices)
    self.output_size = output_size
    triple(output_size, "AdaptiveMaxPool3d", "output_size", nil, 1)
    self.return_indices = need_bool(return_indices, "AdaptiveMaxPool3d", "return_indices")
  end
  function AdaptiveMaxPool3d:forward(x) return F.adaptive_max_pool3d(x, self.output_size, self.return_indices) end
  function AdaptiveMaxPool3d:extra_repr() return "output_size=" .. tuple(self.output_size) end
  nn.AdaptiveMaxPool3d = AdaptiveMaxPool3d

  -- -- normalisation -------------------------------------------------------------------------

  --- nn.BatchNorm3d(num_features, opts): BatchNorm1d for [N, C, D, H, W] input.
  -- @usage local bn = nn.BatchNorm3d(16)
  local BatchNorm3d = nn.BatchNorm2d:extend("BatchNorm3d")
  function BatchNorm3d:check_input_dim(x)
    if x:dim() ~= 5 then
      fail(string.format("BatchNorm3d: expected 5-d input [N, C, D, H, W], got shape %s", shape_str(x)))
    end
  end
  nn.BatchNorm3d = BatchNorm3d

  --- nn.InstanceNorm3d(num_features, opts): InstanceNorm2d for [N, C, D, H, W]
  -- input (or [C, D, H, W], unbatched); opts {eps=1e-5, momentum=0.1,
  -- affine=false, track_running_stats=false, dtype, device}.
  -- @usage local norm = nn.InstanceNorm3d(8, { affine = true })
  local InstanceNorm3d = nn.InstanceNorm2d:extend("InstanceNorm3d")
  function InstanceNorm3d:init(num_features, opts)
    -- checked here first, so that InstanceNorm2d's checks never speak for this class
    local o = nn._opts_of(opts, "InstanceNorm3d")
    positive(num_features, "InstanceNorm3d", "num_features")
    if o.momentum ~= nil and type(o.momentum) ~= "number" then
      fail("InstanceNorm3d: momentum must be a number, got " .. type(o.momentum))
    end
    nn.InstanceNorm2d.init(self, num_features, opts)
  end
  function InstanceNorm3d:forward(x)
    return (with_batch("InstanceNorm3d", x, function(x5)
      if x5:size(2) ~= self.num_features then
        fail(string.format("InstanceNorm3d: input %s has %d channels, expected num_features %d", shape_str(x5),
          x5:size(2), self.num_features))
      end
      return F.instance_norm(x5, self.running_mean, self.running_var, self.weight, self.bias,
        self.training or not self.track_running_stats, self.momentum, self.eps)
    end))
  end
  nn.InstanceNorm3d = InstanceNorm3d

  -- -- interpolation ---------------------------------------------------------------------------

  local INTERP_OPTS = { size = true, scale_factor = true, mode = true, align_corners = true,
                        recompute_scale_factor = true }
  local MODES_5D = { nearest = true, ["nearest-exact"] = true, trilinear = true, area = true }

  -- The output sizes and coordinate scales (nil: from the sizes) of a 5-d x.
  local function interp_sizes(x, size, sf, recompute)
    helpers.need_size_or_scale(size, sf)
    local outs, scales = {}, {}
    for i = 1, 3 do
      if x:size(2 + i) < 1 then
        fail(string.format("interpolate: input %s has an empty spatial dimension", shape_str(x)))
      end
      -- size false reads as absent here, so that it fails as a scale factor
      outs[i], scales[i] = helpers.interp_size(x, i, 3, size or nil, sf, recompute)
    end
    return outs, scales
  end

  local interpolate_2d = F.interpolate

  --- F.interpolate(x, opts) on [N, C, D, H, W] input: the modes "nearest",
  -- "nearest-exact", "trilinear" (align_corners as for the other linear modes)
  -- and "area" (adaptive_avg_pool3d), with size or scale_factor of 3 values
  -- (or one for all). The depth is resampled here, then H and W by the 4-d
  -- interpolate over each depth slice. Other inputs go to the 3-d/4-d F.interpolate.
  -- @usage local y = F.interpolate(vol, { scale_factor = 2, mode = "trilinear" })
  function F.interpolate(x, opts)
    local mode = type(opts) == "table" and opts.mode
    if not (is_tensor(x) and x:dim() == 5) and mode ~= "trilinear" then return interpolate_2d(x, opts) end
    need_float(x, "interpolate", "input")
    opts = options(opts, "interpolate", INTERP_OPTS)
    mode = opts.mode or "nearest"
    if x:dim() ~= 5 or mode == "linear" or mode == "bilinear" then
      local want = mode == "linear" and "a 3-d input (N, C, L)" or mode == "bilinear" and "a 4-d input (N, C, H, W)"
        or "a 5-d input (N, C, D, H, W)"
      fail(string.format("interpolate: mode '%s' needs %s, got %s", mode, want, shape_str(x)))
    end
    if not MODES_5D[mode] then
      fail(string.format("interpolate: mode must be 'nearest', 'nearest-exact', 'linear', 'bilinear', 'trilinear' or 'area', got %s",
        tostring(mode)))
    end
    local ac = opts.align_corners
    if ac ~= nil and mode ~= "trilinear" then
      fail(string.format("interpolate: align_corners can only be set with the linear modes, got mode '%s'", mode))
    end
    need_bool(ac, "interpolate", "align_corners")
    local outs, scales = interp_sizes(x, opts.size, opts.scale_factor, opts.recompute_scale_factor)
    if mode == "area" then return F.adaptive_avg_pool3d(x, outs) end
    local D = x:size(3)
    local y
    if mode == "trilinear" then
      y = helpers.linear_dim(x, -3, D, outs[1], scales[1], ac == true)
    else
      y = helpers.nearest_dim(x, 3, D, outs[1], scales[1], mode == "nearest-exact")
    end
    local o2 = { mode = mode == "trilinear" and "bilinear" or mode, align_corners = ac }
    if opts.size ~= nil or opts.recompute_scale_factor then
      o2.size = { outs[2], outs[3] }
    else
      o2.scale_factor = { scales[2], scales[3] }
    end
    local n, c = y:size(1), y:size(2)
    return interpolate_2d(planes(y), o2):view(n, c, outs[1], outs[2], outs[3])
  end

  --- F.upsample(x, opts): F.interpolate, under the older name PyTorch keeps for it.
  F.upsample = F.interpolate
  -- nn.Upsample (spatial.lua) calls F.interpolate, so it takes these inputs too
end
