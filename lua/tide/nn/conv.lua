--- tide.nn's convolution and pooling: the functional forms (F.conv2d,
-- F.max_pool2d, F.avg_pool2d, F.adaptive_avg_pool2d) over the runtime's ops
-- (tide.nn_ops), which autograd differentiates through their backward ops,
-- and the layers Conv2d, MaxPool2d, AvgPool2d and AdaptiveAvgPool2d.
-- Inputs are NCHW, or CHW for one unbatched image, as in PyTorch. The layers
-- composed of these and other tensor ops are in tide.nn.spatial.
local tide = require "tide"
local B = require "bindings.ffi"
local ops = require "tide.nn_ops"
local fail = B.fail
local is_tensor = tide.is_tensor

return function(nn)
  local F, Module, init = nn.functional, nn.Module, nn.init

  -- Runs f on a 4-d x, or on a 3-d x as a batch of one (the result loses that dim again).
  local function batched(name, x, f)
    if not is_tensor(x) then fail(string.format("%s: input must be a tensor, got %s", name, type(x))) end
    if x:dim() == 3 then
      local a, b = f(x:unsqueeze(1))
      return a:squeeze(1), b and b:squeeze(1)
    end
    if x:dim() ~= 4 then
      fail(string.format("%s: expects a 3-d (C, H, W) or 4-d (N, C, H, W) input, got %d-d", name, x:dim()))
    end
    return f(x)
  end

  --- F.conv2d(x, weight, bias, {stride=1, padding=0, dilation=1, groups=1}): 2-d
  -- cross-correlation, as torch.nn.functional.conv2d; each option a number or {h, w},
  -- padding also "valid" or "same".
  -- @usage local y = F.conv2d(x, w, b, { padding = 1 })
  function F.conv2d(x, weight, bias, opts)
    return (batched("conv2d", x, function(x4) return ops.conv2d(x4, weight, bias, opts) end))
  end

  --- F.max_pool2d(x, kernel, {stride=kernel, padding=0, dilation=1, ceil_mode=false,
  -- return_indices=false}): the maxima of each window (and their 1-based positions
  -- in each input plane with return_indices).
  -- @usage local y = F.max_pool2d(x, 2)
  function F.max_pool2d(x, kernel, opts)
    return batched("max_pool2d", x, function(x4) return ops.max_pool2d(x4, kernel, opts) end)
  end

  --- F.avg_pool2d(x, kernel, {stride=kernel, padding=0, ceil_mode=false,
  -- count_include_pad=true, divisor_override=nil}).
  -- @usage local y = F.avg_pool2d(x, 3, { stride = 2, padding = 1 })
  function F.avg_pool2d(x, kernel, opts)
    return (batched("avg_pool2d", x, function(x4) return ops.avg_pool2d(x4, kernel, opts) end))
  end

  --- F.adaptive_avg_pool2d(x, output_size): averages over windows that tile the
  -- input into output_size (a number or {h, w}).
  -- @usage local y = F.adaptive_avg_pool2d(x, 1)
  function F.adaptive_avg_pool2d(x, output_size)
    return (batched("adaptive_avg_pool2d", x, function(x4) return ops.adaptive_avg_pool2d(x4, output_size) end))
  end

  local function pair(v) return type(v) == "table" and v or { v, v } end
  local function pair_str(v)
    if type(v) == "string" then return v end
    v = pair(v)
    return string.format("(%d, %d)", v[1], v[2])
  end
  local function positive(v, cname, what)
    if type(v) ~= "number" or v < 1 or v ~= math.floor(v) then
      fail(string.format("%s: %s must be a positive integer, got %s", cname, what, tostring(v)))
    end
    return v
  end

  --- nn.Conv2d(in_channels, out_channels, kernel_size, opts): a 2-d convolution
  -- layer; opts {stride=1, padding=0, dilation=1, groups=1, bias=true,
  -- padding_mode="zeros" (or "reflect", "replicate", "circular": F.pad first), dtype, device}.
  -- Weight and bias are initialised as PyTorch does (Kaiming-uniform, a = sqrt(5)).
  -- @usage local conv = nn.Conv2d(1, 32, 3, { padding = 1 })
  local Conv2d = Module:extend("Conv2d")
  function Conv2d:init(in_channels, out_channels, kernel_size, opts)
    opts = opts or {}
    if type(opts) ~= "table" then fail("Conv2d: options must be a table, got " .. type(opts)) end
    local groups = opts.groups or 1
    positive(in_channels, "Conv2d", "in_channels")
    positive(out_channels, "Conv2d", "out_channels")
    positive(groups, "Conv2d", "groups")
    if in_channels % groups ~= 0 or out_channels % groups ~= 0 then
      fail(string.format("Conv2d: in_channels (%d) and out_channels (%d) must be divisible by groups (%d)",
        in_channels, out_channels, groups))
    end
    local k = pair(kernel_size)
    positive(k[1], "Conv2d", "kernel_size")
    positive(k[2], "Conv2d", "kernel_size")
    self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, k
    self.stride, self.padding, self.dilation, self.groups = opts.stride or 1, opts.padding or 0,
      opts.dilation or 1, groups
    local mode = opts.padding_mode or "zeros"
    if mode ~= "zeros" and mode ~= "reflect" and mode ~= "replicate" and mode ~= "circular" then
      fail("Conv2d: padding_mode must be 'zeros', 'reflect', 'replicate' or 'circular', got " .. tostring(mode))
    end
    if mode ~= "zeros" and type(self.padding) == "string" then
      fail(string.format("Conv2d: padding='%s' needs padding_mode 'zeros', got '%s'", self.padding, mode))
    end
    self.padding_mode = mode
    local to = { dtype = opts.dtype or "float32", device = opts.device }
    self:register_parameter("weight", tide.empty({ out_channels, in_channels / groups, k[1], k[2] }, to))
    if opts.bias ~= false then self:register_parameter("bias", tide.empty({ out_channels }, to)) end
    self:reset_parameters()
  end
  --- Draws the weight and bias again, as at creation.
  function Conv2d:reset_parameters() init.reset_linear_(self.weight, self.bias) end
  function Conv2d:forward(x)
    local o = { stride = self.stride, padding = self.padding, dilation = self.dilation, groups = self.groups }
    if self.padding_mode ~= "zeros" then
      local p = pair(self.padding)
      x = F.pad(x, { p[2], p[2], p[1], p[1] }, self.padding_mode)
      o.padding = 0
    end
    return F.conv2d(x, self.weight, self.bias, o)
  end
  function Conv2d:extra_repr()
    local s = string.format("%d, %d, kernel_size=%s, stride=%s", self.in_channels, self.out_channels,
      pair_str(self.kernel_size), pair_str(self.stride))
    if self.padding ~= 0 then s = s .. ", padding=" .. pair_str(self.padding) end
    if self.dilation ~= 1 then s = s .. ", dilation=" .. pair_str(self.dilation) end
    if self.groups ~= 1 then s = s .. ", groups=" .. self.groups end
    if self.bias == nil then s = s .. ", bias=false" end
    if self.padding_mode ~= "zeros" then s = s .. ", padding_mode=" .. self.padding_mode end
    return s
  end
  nn.Conv2d = Conv2d

  --- nn.MaxPool2d(kernel_size, opts): opts {stride=kernel_size, padding=0, dilation=1,
  -- ceil_mode=false, return_indices=false}.
  -- @usage local pool = nn.MaxPool2d(2)
  local MaxPool2d = Module:extend("MaxPool2d")
  function MaxPool2d:init(kernel_size, opts)
    self.kernel_size, self.opts = kernel_size, opts or {}
  end
  function MaxPool2d:forward(x) return F.max_pool2d(x, self.kernel_size, self.opts) end
  function MaxPool2d:extra_repr()
    local o = self.opts
    return string.format("kernel_size=%s, stride=%s, padding=%s, dilation=%s, ceil_mode=%s",
      pair_str(self.kernel_size), pair_str(o.stride or self.kernel_size), pair_str(o.padding or 0),
      pair_str(o.dilation or 1), tostring(o.ceil_mode or false))
  end
  nn.MaxPool2d = MaxPool2d

  --- nn.AvgPool2d(kernel_size, opts): opts {stride=kernel_size, padding=0,
  -- ceil_mode=false, count_include_pad=true, divisor_override=nil}.
  -- @usage local pool = nn.AvgPool2d(2)
  local AvgPool2d = Module:extend("AvgPool2d")
  function AvgPool2d:init(kernel_size, opts)
    self.kernel_size, self.opts = kernel_size, opts or {}
  end
  function AvgPool2d:forward(x) return F.avg_pool2d(x, self.kernel_size, self.opts) end
  function AvgPool2d:extra_repr()
    local o = self.opts
    return string.format("kernel_size=%s, stride=%s, padding=%s", pair_str(self.kernel_size),
      pair_str(o.stride or self.kernel_size), pair_str(o.padding or 0))
  end
  nn.AvgPool2d = AvgPool2d

  --- nn.AdaptiveAvgPool2d(output_size): output_size a number or {h, w}.
  -- @usage local gap = nn.AdaptiveAvgPool2d(1)
  local AdaptiveAvgPool2d = Module:extend("AdaptiveAvgPool2d")
  function AdaptiveAvgPool2d:init(output_size) self.output_size = output_size end
  function AdaptiveAvgPool2d:forward(x) return F.adaptive_avg_pool2d(x, self.output_size) end
  function AdaptiveAvgPool2d:extra_repr() return "output_size=" .. pair_str(self.output_size) end
  nn.AdaptiveAvgPool2d = AdaptiveAvgPool2d

  -- 1-d convolution and pooling, transposed convolutions, group and instance
  -- norms, padding, interpolation and pixel shuffling, composed of the above
  require("tide.nn.spatial")(nn)
  -- adaptive max pooling, unpooling, lp pooling, local response norm, channel shuffle
  require("tide.nn.spatial_extra")(nn)
  -- affine_grid and grid_sample, 2-d and 3-d
  require("tide.nn.grid_sample")(nn)
  -- the 3-d convolutions, pools and norms, and 5-d interpolation, composed of the 2-d ones
  require("tide.nn.spatial3d")(nn)
end
