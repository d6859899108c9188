--- tide.nn.helpers: what the spatial modules (spatial.lua, spatial_extra.lua,
-- spatial3d.lua) share: running on unbatched input, sizes given as an integer
-- or a table, return_indices, empty spatial dims, the checks of a
-- convolution's channels, groups and bias, and a convolution layer's setup.
-- The argument checks of all of tide are in tide.args; what one file alone
-- needs stays in that file.
local tide = require "tide"
local B = require "bindings.ffi"
local ffi = require "ffi"
local args = require "tide.args"
local fail = B.fail
local is_int, shape_str, list_str = args.is_int, args.shape_str, args.list_str

local M = {}

--- The dtype and device of x, as tensor constructors take them.
function M.on(x) return { dtype = x:dtype(), device = x:device() } end

--- f(x) for x of `batched` dims, or for x with a batch dim of one added where
-- it has one fewer (unbatched; the results lose that dim again). layout names
-- the dims after N in the error ("C, H, W"), which ends "got shape [..]", or
-- with by_dims "got 2-d" (spatial.lua's wording).
function M.with_batch(name, x, batched, layout, f, by_dims)
  args.need_tensor(x, name, "input")
  if x:dim() == batched - 1 then
    local a, b = f(x:unsqueeze(1))
    return a:squeeze(1), b and b:squeeze(1)
  end
  if x:dim() ~= batched then
    fail(string.format("%s: expects a %d-d (%s) or %d-d (N, %s) input, got %s", name, batched - 1, layout,
      batched, layout, by_dims and x:dim() .. "-d" or "shape " .. shape_str(x)))
  end
  return f(x)
end

local NAMES = { [2] = "{h, w}", [3] = "{d, h, w}" }

--- n (2 or 3) sizes, as a table, of an integer or a table of n integers (v
-- nil: default); each at least lo where lo is given.
function M.sizes(v, n, name, what, default, lo)
  if v == nil then v = default end
  local ok = type(v) == "table" and #v == n
  for i = 1, n do ok = ok and is_int(v[i]) end
  local r = {}
  if is_int(v) then
    for i = 1, n do r[i] = v end
  elseif ok then
    for i = 1, n do r[i] = v[i] end
  else
    fail(string.format("%s: %s must be an integer or a table %s of integers, got %s", name, what, NAMES[n],
      type(v) == "table" and ("a table of " .. #v) or tostring(v)))
  end
  for i = 1, n do
    if lo and r[i] < lo then
      fail(string.format("%s: %s must be %s, got %s", name, what, lo == 0 and "non-negative" or "positive",
        list_str(r)))
    end
  end
  return r
end

--- return_indices, given as a boolean or as {return_indices = b}, as a boolean.
function M.indices_flag(v, name)
  if type(v) == "table" then v = args.options(v, name, { return_indices = true }).return_indices end
  return args.need_bool(v, name, "return_indices")
end

--- Checks that the dims of x from `first` on (its spatial dims) are not empty.
function M.need_spatial(name, x, first)
  for d = first, x:dim() do
    if x:size(d) < 1 then
      fail(string.format("%s: input %s has an empty spatial dimension %d", name, shape_str(x), d))
    end
  end
end

-- -- convolutions ------------------------------------------------------------------------

--- Checks that bias (if given) is [o].
function M.need_bias(name, bias, o)
  if bias == nil then return end
  args.need_tensor(bias, name, "bias")
  if bias:dim() ~= 1 or bias:size(1) ~= o then
    fail(string.format("%s: bias of shape %s does not match the %d output channels", name, shape_str(bias), o))
  end
end

--- The groups (opts.groups, default 1) of a convolution of x [N, C, ...] by
-- weight [O, C/groups, ...], checked against both, and the bias checked.
function M.conv_groups(name, x, weight, bias, opts)
  local groups = args.positive(opts.groups == nil and 1 or opts.groups, name, "groups")
  local c, o, cg = x:size(2), weight:size(1), weight:size(2)
  if c ~= cg * groups then
    fail(string.format("%s: input %s has %d channels, but weight %s with groups %d expects %d", name, shape_str(x),
      c, shape_str(weight), groups, cg * groups))
  end
  if o % groups ~= 0 then
    fail(string.format("%s: the %d output channels of weight %s are not divisible by groups %d", name, o,
      shape_str(weight), groups))
  end
  M.need_bias(name, bias, o)
  return groups
end

--- The groups of a transposed convolution of x [N, C, ...] by weight [C,
-- O/groups, ...], checked, and the bias [O] checked. xs and ws: the shapes
-- of the input and weight the user gave, for the message (default x's, weight's).
function M.conv_transpose_groups(name, x, weight, bias, opts, xs, ws)
  local groups = args.positive(opts.groups == nil and 1 or opts.groups, name, "groups")
  local cin = weight:size(1)
  if x:size(2) ~= cin or cin % groups ~= 0 then
    fail(string.format("%s: input %s has %d channels, but weight %s with groups %d expects %d, divisible by groups",
      name, xs or shape_str(x), x:size(2), ws or shape_str(weight), groups, cin))
  end
  M.need_bias(name, bias, weight:size(2) * groups)
  return groups
end

local PAD_MODES = { reflect = true, replicate = true, circular = true }

--- Sets up a convolution layer: its sizes and options, and the parameters
-- weight ([out, in/groups, k...], or [in, out/groups, k...] transposed) and
-- bias, drawn by self:reset_parameters(). kernel() parses kernel_size (as a
-- table), after the channels and groups are checked.
function M.conv_init(self, cname, transposed, in_channels, out_channels, kernel, opts)
  opts = args.options(opts, cname)
  local groups = opts.groups or 1
  args.positive(in_channels, cname, "in_channels")
  args.positive(out_channels, cname, "out_channels")
  args.positive(groups, cname, "groups")
  if in_channels % groups ~= 0 or out_channels % groups ~= 0 then
    fail(string.format("%s: in_channels (%d) and out_channels (%d) must be divisible by groups (%d)", cname,
      in_channels, out_channels, groups))
  end
  local k = kernel()
  local mode = opts.padding_mode or "zeros"
  if mode ~= "zeros" and (transposed or not PAD_MODES[mode]) then
    fail(string.format("%s: padding_mode must be %s, got %s", cname,
      transposed and "'zeros'" or "'zeros', 'reflect', 'replicate' or 'circular'", tostring(mode)))
  end
  self.in_channels, self.out_channels, self.kernel_size, self.groups = in_channels, out_channels, k, groups
  self.stride, self.padding, self.dilation = opts.stride or 1, opts.padding or 0, opts.dilation or 1
  self.padding_mode = mode
  if transposed then self.output_padding = opts.output_padding or 0 end
  local shape = transposed and { in_channels, out_channels / groups } or { out_channels, in_channels / groups }
  for i = 1, #k do shape[2 + i] = k[i] end
  local to = { dtype = opts.dtype or "float32", device = opts.device }
  self:register_parameter("weight", tide.empty(shape, to))
  if opts.bias ~= false then self:register_parameter("bias", tide.empty({ out_channels }, to)) end
  self:reset_parameters()
  if not transposed and mode ~= "zeros" and type(self.padding) == "string" then
    fail(string.format("%s: padding='%s' needs padding_mode 'zeros', got '%s'", cname, self.padding, mode))
  end
end

-- -- resampling (interpolate) ----------------------------------------------------------------

local function f32(v) return tonumber(ffi.new("float", v)) end

--- x resampled along dim d from n to m elements by nearest neighbour; s the
-- scale factor the user gave (the coordinate scale is then 1/s), or nil. As
-- PyTorch, in float32: src = min(floor(dst * scale), n - 1) ("nearest"), or
-- floor((dst + 0.5) * scale) ("nearest-exact").
function M.nearest_dim(x, d, n, m, s, exact)
  if not exact and m == n then return x end
  local scale = f32(s and 1 / s or f32(n) / f32(m))
  local src = tide.arange(0, m, { dtype = "float32", device = x:device() })
  if exact then src = src + 0.5 end
  if not exact and m == 2 * n then scale = 0.5 end
  local idx = (src * scale):floor():clamp(nil, n - 1):long() + 1
  return x:index_select(d, idx)
end

--- x resampled along dim d (counted from the end: -1, -2, -3) from n to m
-- elements by linear interpolation, as PyTorch's upsample_linear/bilinear/trilinear
-- (in float32 for float32 input): src = dst * (n - 1) / (m - 1) with
-- align_corners, else max((dst + 0.5) * scale - 0.5, 0); then the two
-- neighbours floor(src) and the one after (clamped) weighted by 1 - frac, frac.
function M.linear_dim(x, d, n, m, s, align_corners)
  local dtype = x:dtype() == "float64" and "float64" or "float32"
  local round = dtype == "float32" and f32 or function(v) return v end
  local src = tide.arange(0, m, { dtype = dtype, device = x:device() })
  if align_corners then
    src = src * round(m > 1 and (n - 1) / (m - 1) or 0)
  else
    local scale = round(s and 1 / s or round(n) / round(m))
    src = ((src + 0.5) * scale - 0.5):clamp(0)
  end
  local i0 = src:floor():clamp(nil, n - 1)
  local lam = (src - i0):clamp(0, 1)
  local i1 = (i0 + 1):clamp(nil, n - 1)
  local shape = { m }
  for i = 2, -d do shape[i] = 1 end   -- lam broadcast over the dims after d
  lam = lam:to(x:dtype()):view(shape)
  local a = x:index_select(x:dim() + d + 1, i0:long() + 1)
  local b = x:index_select(x:dim() + d + 1, i1:long() + 1)
  return a * (-lam + 1) + b * lam
end

--- Checks that interpolate got exactly one of size and scale_factor.
function M.need_size_or_scale(size, sf)
  if (size == nil) == (sf == nil) then
    fail(size and "interpolate: only one of size or scale_factor should be defined"
      or "interpolate: either size or scale_factor should be defined")
  end
end

--- The output size of spatial dim i (of k) of x, from interpolate's size or
-- scale_factor (one number, or a table of k), and the scale factor that
-- resamples it (nil: from the sizes; always with size, or recompute).
function M.interp_size(x, i, k, size, sf, recompute)
  local v = sf
  if size ~= nil then v = size end
  if type(v) == "table" then
    if #v ~= k then
      fail(string.format("interpolate: %s must have %d values for input %s, got %d",
        size ~= nil and "size" or "scale_factor", k, shape_str(x), #v))
    end
    v = v[i]
  end
  if size ~= nil then
    if not is_int(v) or v < 1 then
      fail(string.format("interpolate: sizes must be positive integers, got %s", tostring(v)))
    end
    return v
  end
  if type(v) ~= "number" or not (v > 0) then
    fail(string.format("interpolate: scale factors must be positive numbers, got %s", tostring(v)))
  end
  local out = math.floor(x:size(2 + i) * v)
  if out < 1 then
    fail(string.format("interpolate: scale_factor %g makes dimension %d of input %s empty", v, 2 + i, shape_str(x)))
  end
  if not recompute then return out, v end
  return out
end

return M
