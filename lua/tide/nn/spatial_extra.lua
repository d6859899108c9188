--- tide.nn's spatial layers beyond spatial.lua's: adaptive max pooling, max
-- unpooling, power-average pooling, local response normalisation, channel
-- shuffling, as torch.nn has them (MaxUnpool3d and LPPool3d too). All are
-- composed of tensor ops (gather, scatter, index_select, the runtime's pools)
-- that autograd differentiates through their own rules; window tables come
-- from shapes alone, so no host reads.
-- The 3-d pools are in spatial3d.lua; affine_grid and grid_sample in grid_sample.lua.
local tide = require "tide"
local B = require "bindings.ffi"
local args = require "tide.args"
local helpers = require "tide.nn.helpers"
local fail = B.fail
local is_tensor = tide.is_tensor
local floor, ceil = math.floor, math.ceil

return function(nn)
  local F, Module = nn.functional, nn.Module

  -- -- helpers ---------------------------------------------------------------------

  local shape_str, is_int, need_tensor, need_float = args.shape_str, args.is_int, args.need_tensor, args.need_float
  local options, need_bool, positive, list_str = args.options, args.need_bool, args.positive, args.list_str
  local on, with_batch, indices_flag = helpers.on, helpers.with_batch, helpers.indices_flag
  local need_spatial = helpers.need_spatial

  -- n sizes from an integer or a table of n (1-d also takes {n}); each at least lo.
  local function sizes(v, n, name, what, lo)
    local r = {}
    if is_int(v) then
      for i = 1, n do r[i] = v end
    elseif type(v) == "table" and #v == n then
      for i = 1, n do r[i] = v[i] end
    else
      fail(string.format("%s: %s must be an integer or a table of %d integers, got %s", name, what, n,
        type(v) == "table" and ("a table of " .. #v) or tostring(v)))
    end
    for i = 1, n do
      if not is_int(r[i]) or r[i] < lo then
        fail(string.format("%s: %s must be %s integers, got %s", name, what, lo == 0 and "non-negative" or "positive",
          tostring(r[i])))
      end
    end
    return r
  end

  -- -- adaptive max pooling ------------------------------------------------------------

  -- PyTorch's adaptive windows of n elements into m: window i (0-based) spans
  -- [floor(i n / m), ceil((i + 1) n / m)). Returns the 0-based positions read,
  -- an int64 tensor [m, K] (K the longest window; shorter ones repeat their
  -- last element, which cannot change a maximum or its first position).
  local function windows(n, m, device)
    local K = 0
    for i = 0, m - 1 do K = math.max(K, ceil((i + 1) * n / m) - floor(i * n / m)) end
    local i = tide.arange(0, m, { dtype = "float64", device = device }):view(m, 1)
    local start = (i * n / m):floor()
    local stop = ((i + 1) * n / m):ceil() - 1
    local k = tide.arange(0, K, { dtype = "float64", device = device }):view(1, K)
    return tide.minimum(start + k, stop):long(), K
  end

  -- Maxima of x3 [N, C, L] (or a flattened plane [N, C, H*W]) over the windows
  -- of 0-based positions pos [P, K]: values [N, C, P] and their 1-based positions.
  local function window_max(x3, pos, P, K)
    local n, c = x3:size(1), x3:size(2)
    local v, k = x3:index_select(3, pos:reshape(P * K) + 1):view(n, c, P, K):max(4)
    local idx = (pos + 1):view(1, 1, P, K):expand(n, c, P, K):gather(4, k:unsqueeze(4)):squeeze(4)
    return v, idx
  end

  --- F.adaptive_max_pool1d(x, output_size, return_indices): the maxima of
  -- output_size windows that tile L (window i spanning floor(i L / out) to
  -- ceil((i + 1) L / out), as PyTorch's), and with return_indices their
  -- 1-based positions along L (the first of equal maxima).
  -- @param x [N, C, L] or [C, L]
  -- @param output_size an integer or {n}
  -- @param return_indices a boolean, or {return_indices = b}
  -- @return [N, C, output_size] (and int64 indices of that shape)
  -- @usage local y, idx = F.adaptive_max_pool1d(x, 4, true)
  function F.adaptive_max_pool1d(x, output_size, return_indices)
    local name = "adaptive_max_pool1d"
    local out = sizes(output_size, 1, name, "output_size", 1)[1]
    local want_idx = indices_flag(return_indices, name)
    local y, idx = with_batch(name, x, 3, "C, L", function(x3)
      need_float(x3, name, "input")
      need_spatial(name, x3, 3)
      local pos, K = windows(x3:size(3), out, x3:device())
      return window_max(x3, pos, out, K)
    end)
    if want_idx then return y, idx end
    return y
  end

  --- F.adaptive_max_pool2d(x, output_size, return_indices): adaptive max
  -- pooling over H and W (the windows of adaptive_max_pool1d along each);
  -- indices are 1-based positions in each flattened H x W plane, as max_pool2d's.
  -- @param x [N, C, H, W] or [C, H, W]
  -- @param output_size an integer or {oh, ow}
  -- @param return_indices a boolean, or {return_indices = b}
  -- @return [N, C, oh, ow] (and int64 indices of that shape)
  -- @usage local y = F.adaptive_max_pool2d(x, { 7, 7 })
  function F.adaptive_max_pool2d(x, output_size, return_indices)
    local name = "adaptive_max_pool2d"
    local out = sizes(output_size, 2, name, "output_size", 1)
    local want_idx = indices_flag(return_indices, name)
    local y, idx = with_batch(name, x, 4, "C, H, W", function(x4)
      need_float(x4, name, "input")
      need_spatial(name, x4, 3)
      local n, c, h, w = x4:size(1), x4:size(2), x4:size(3), x4:size(4)
      local rows, kh = windows(h, out[1], x4:device())
      local cols, kw = windows(w, out[2], x4:device())
      local pos = rows:view(out[1], 1, kh, 1) * w + cols:view(1, out[2], 1, kw)   -- [oh, ow, kh, kw]
      local v, i = window_max(x4:reshape(n, c, h * w), pos:reshape(out[1] * out[2], kh * kw), out[1] * out[2], kh * kw)
      return v:view(n, c, out[1], out[2]), i:view(n, c, out[1], out[2])
    end)
    if want_idx then return y, idx end
    return y
  end

  --- nn.AdaptiveMaxPool1d(output_size, return_indices) and nn.AdaptiveMaxPool2d(output_size,
  -- return_indices): F.adaptive_max_pool1d/2d as modules (with return_indices, forward
  -- returns the maxima and their indices).
  -- @usage local pool = nn.AdaptiveMaxPool2d({ 5, 7 })
  for n = 1, 2 do
    local cname = "AdaptiveMaxPool" .. n .. "d"
    local fn = n == 1 and F.adaptive_max_pool1d or F.adaptive_max_pool2d
    local cls = Module:extend(cname)
    function cls:init(output_size, return_indices)
      self.output_size = sizes(output_size, n, cname, "output_size", 1)
      self.return_indices = indices_flag(return_indices, cname)
    end
    function cls:forward(x) return fn(x, self.output_size, self.return_indices) end
    function cls:extra_repr()
      local o = self.output_size
      return "output_size=" .. (n == 1 and tostring(o[1]) or string.format("(%d, %d)", o[1], o[2]))
    end
    nn[cname] = cls
  end

  -- -- max unpooling ---------------------------------------------------------------------

  local UNPOOL_OPTS = { stride = true, padding = true, output_size = true }

  -- The output's spatial sizes of a max_unpool of n dims: from the input's
  -- sizes `ins` and kernel/stride/padding, or output_size (n sizes, or n + 2
  -- with N and C first) within a stride of that, as PyTorch's.
  local function unpool_size(name, n, ins, k, s, p, output_size)
    local def = {}
    for i = 1, n do def[i] = (ins[i] - 1) * s[i] - 2 * p[i] + k[i] end
    if output_size == nil then return def end
    local o = type(output_size) == "table" and output_size or { output_size }
    if #o == n + 2 then o = { unpack(o, 3) } end
    if #o ~= n then
      fail(string.format("%s: output_size must have %d or %d elements, got %d", name, n, n + 2, #o))
    end
    for i = 1, n do
      if not is_int(o[i]) or o[i] <= def[i] - s[i] or o[i] >= def[i] + s[i] then
        fail(string.format("%s: invalid output_size %s (dim %d must be between %d and %d)", name, list_str(o),
          i, def[i] - s[i] + 1, def[i] + s[i] - 1))
      end
    end
    return o
  end

  -- The max_unpool of n (1, 2 or 3) spatial dims of xb [N, C, ...] and its indices.
  local function max_unpool(name, n, xb, indices, kernel_size, opts)
    need_float(xb, name, "input")
    local k = sizes(kernel_size, n, name, "kernel_size", 1)
    local s = sizes(opts.stride == nil and k or opts.stride, n, name, "stride", 1)
    local p = sizes(opts.padding == nil and 0 or opts.padding, n, name, "padding", 0)
    local ins = {}
    for i = 1, n do ins[i] = xb:size(2 + i) end
    local o = unpool_size(name, n, ins, k, s, p, opts.output_size)
    local nb, c, plane, inplane = xb:size(1), xb:size(2), 1, 1
    for i = 1, n do
      inplane = inplane * ins[i]
      if o[i] < 1 then
        fail(string.format("%s: input %s with kernel_size %s, stride %s and padding %s gives an empty output", name,
          shape_str(xb), list_str(k), list_str(s), list_str(p)))
      end
      plane = plane * o[i]
    end
    local shape = { nb, c }
    for i = 1, n do shape[2 + i] = o[i] end
    return tide.zeros({ nb, c, plane }, on(xb))
      :scatter(3, indices:to("int64"):reshape(nb, c, inplane), xb:reshape(nb, c, inplane)):view(shape)
  end

  local function need_indices(name, x, indices)
    need_tensor(indices, name, "indices")
    if indices:dtype() ~= "int64" and indices:dtype() ~= "int32" then
      fail(string.format("%s: indices must be an int64 or int32 tensor (max_pool's), got %s", name, indices:dtype()))
    end
    if is_tensor(x) and table.concat(x:shape(), ",") ~= table.concat(indices:shape(), ",") then
      fail(string.format("%s: indices of shape %s do not match input of shape %s", name, shape_str(indices),
        shape_str(x)))
    end
  end

  -- F.max_unpool1d/2d/3d: n spatial dims, named by layout in the errors.
  local function max_unpool_nd(name, n, layout, x, indices, kernel_size, opts)
    opts = options(opts, name, UNPOOL_OPTS)
    need_indices(name, x, indices)
    local unbatched = is_tensor(x) and x:dim() == n + 1
    return (with_batch(name, x, n + 2, layout, function(xb)
      return max_unpool(name, n, xb, unbatched and indices:unsqueeze(1) or indices, kernel_size, opts)
    end))
  end

  --- F.max_unpool1d(x, indices, kernel_size, {stride = kernel_size, padding = 0,
  -- output_size}): the partial inverse of max_pool1d: each value of x put at
  -- its 1-based index (max_pool1d's return_indices) along an output of
  -- (L - 1) stride - 2 padding + kernel_size zeros, or output_size.
  -- @param x [N, C, L] or [C, L]
  -- @param indices int64, x's shape
  -- @return [N, C, oL]
  -- @usage local y = F.max_unpool1d(pooled, idx, 2)
  function F.max_unpool1d(x, indices, kernel_size, opts)
    return max_unpool_nd("max_unpool1d", 1, "C, L", x, indices, kernel_size, opts)
  end

  --- F.max_unpool2d(x, indices, kernel_size, {stride = kernel_size, padding = 0,
  -- output_size}): the partial inverse of max_pool2d: each value of x put at
  -- its 1-based index in the flattened output plane (max_pool2d's
  -- return_indices), the rest zeros; the plane is (H - 1) stride - 2 padding +
  -- kernel_size high (and so wide), or output_size ({h, w} or {N, C, h, w}).
  -- @param x [N, C, H, W] or [C, H, W]
  -- @param indices int64, x's shape
  -- @return [N, C, oH, oW]
  -- @usage local y, idx = F.max_pool2d(x, 2, { return_indices = true }); local z = F.max_unpool2d(y, idx, 2)
  function F.max_unpool2d(x, indices, kernel_size, opts)
    return max_unpool_nd("max_unpool2d", 2, "C, H, W", x, indices, kernel_size, opts)
  end

  --- F.max_unpool3d(x, indices, kernel_size, {stride = kernel_size, padding = 0,
  -- output_size}): max_unpool2d over D, H and W: each value of x put at its
  -- 1-based index in the flattened D x H x W output (max_pool3d's return_indices).
  -- @param x [N, C, D, H, W] or [C, D, H, W]
  -- @param indices int64, x's shape
  -- @return [N, C, oD, oH, oW]
  -- @usage local y, idx = F.max_pool3d(x, 2, { return_indices = true }); local z = F.max_unpool3d(y, idx, 2)
  function F.max_unpool3d(x, indices, kernel_size, opts)
    return max_unpool_nd("max_unpool3d", 3, "C, D, H, W", x, indices, kernel_size, opts)
  end

  -- (1,), (1, 2) or (1, 2, 3): a size table as PyTorch prints a tuple.
  local function tuple(v)
    if #v == 1 then return string.format("(%d,)", v[1]) end
    return "(" .. table.concat(v, ", ") .. ")"
  end

  --- nn.MaxUnpool1d(kernel_size, stride = kernel_size, padding = 0), nn.MaxUnpool2d(...)
  -- and nn.MaxUnpool3d(...): F.max_unpool1d/2d/3d as modules; forward(x, indices, output_size).
  -- @usage local unpool = nn.MaxUnpool2d(2); local z = unpool(y, idx)
  for n = 1, 3 do
    local cname = "MaxUnpool" .. n .. "d"
    local fn = ({ F.max_unpool1d, F.max_unpool2d, F.max_unpool3d })[n]
    local cls = Module:extend(cname)
    function cls:init(kernel_size, stride, padding)
      self.kernel_size = sizes(kernel_size, n, cname, "kernel_size", 1)
      self.stride = sizes(stride == nil and self.kernel_size or stride, n, cname, "stride", 1)
      self.padding = sizes(padding == nil and 0 or padding, n, cname, "padding", 0)
    end
    function cls:forward(x, indices, output_size)
      return fn(x, indices, self.kernel_size, { stride = self.stride, padding = self.padding,
        output_size = output_size })
    end
    function cls:extra_repr()
      return string.format("kernel_size=%s, stride=%s, padding=%s", tuple(self.kernel_size), tuple(self.stride),
        tuple(self.padding))
    end
    nn[cname] = cls
  end

  -- -- power-average pooling --------------------------------------------------------------

  local LP_OPTS = { stride = true, ceil_mode = true }

  local function need_norm_type(p, name)
    if type(p) ~= "number" or not (p > 0) or p == math.huge then
      fail(string.format("%s: norm_type must be a positive finite number, got %s", name, tostring(p)))
    end
    return p
  end

  -- PyTorch's lp_pool of x4 [N, C, H, W] over k = {kh, kw} windows: the
  -- average of x^p times the window's size, to the power 1/p; sign(a) relu(|a|)
  -- keeps its gradient 0 where a window sums to 0, as torch's composition.
  local function lp_pool(name, x4, p, k, opts, x)
    local s = sizes(opts.stride == nil and k or opts.stride, 2, name, "stride", 1)
    need_bool(opts.ceil_mode, name, "ceil_mode")
    if x4:size(3) < k[1] or x4:size(4) < k[2] then
      fail(string.format("%s: kernel_size %s is larger than the input %s", name,
        x and tostring(k[2]) or list_str(k), shape_str(x or x4)))
    end
    local a = F.avg_pool2d(x4:pow(p), k, { stride = s, ceil_mode = opts.ceil_mode == true })
    return (a:sign() * a:abs():relu()):mul(k[1] * k[2]):pow(1 / p)
  end

  --- F.lp_pool1d(x, norm_type, kernel_size, {stride = kernel_size, ceil_mode = false}):
  -- the p-norm of each window, (sum x^p)^(1/p), as torch.nn.functional.lp_pool1d.
  -- @param x [N, C, L] or [C, L]
  -- @param norm_type p, a positive number
  -- @usage local y = F.lp_pool1d(x, 2, 3, { stride = 2 })
  function F.lp_pool1d(x, norm_type, kernel_size, opts)
    local name = "lp_pool1d"
    opts = options(opts, name, LP_OPTS)
    need_norm_type(norm_type, name)
    local k = sizes(kernel_size, 1, name, "kernel_size", 1)[1]
    local o = { stride = opts.stride ~= nil and { 1, sizes(opts.stride, 1, name, "stride", 1)[1] } or nil,
                ceil_mode = opts.ceil_mode }
    return (with_batch(name, x, 3, "C, L", function(x3)
      need_float(x3, name, "input")
      return lp_pool(name, x3:unsqueeze(3), norm_type, { 1, k }, o, x3):squeeze(3)
    end))
  end

  --- F.lp_pool2d(x, norm_type, kernel_size, {stride = kernel_size, ceil_mode = false}):
  -- the p-norm of each window, as torch.nn.functional.lp_pool2d.
  -- @param x [N, C, H, W] or [C, H, W]
  -- @param norm_type p, a positive number
  -- @param kernel_size an integer or {kh, kw}
  -- @usage local y = F.lp_pool2d(x, 2, 2)
  function F.lp_pool2d(x, norm_type, kernel_size, opts)
    local name = "lp_pool2d"
    opts = options(opts, name, LP_OPTS)
    need_norm_type(norm_type, name)
    local k = sizes(kernel_size, 2, name, "kernel_size", 1)
    return (with_batch(name, x, 4, "C, H, W", function(x4)
      need_float(x4, name, "input")
      return lp_pool(name, x4, norm_type, k, opts)
    end))
  end

  --- F.lp_pool3d(x, norm_type, kernel_size, {stride = kernel_size, ceil_mode = false}):
  -- the p-norm of each D x H x W window, as torch.nn.functional.lp_pool3d.
  -- @param x [N, C, D, H, W] or [C, D, H, W]
  -- @param norm_type p, a positive number
  -- @param kernel_size an integer or {kd, kh, kw}
  -- @usage local y = F.lp_pool3d(x, 2, 2)
  function F.lp_pool3d(x, norm_type, kernel_size, opts)
    local name = "lp_pool3d"
    opts = options(opts, name, LP_OPTS)
    need_norm_type(norm_type, name)
    local k = sizes(kernel_size, 3, name, "kernel_size", 1)
    local s = sizes(opts.stride == nil and k or opts.stride, 3, name, "stride", 1)
    need_bool(opts.ceil_mode, name, "ceil_mode")
    return (with_batch(name, x, 5, "C, D, H, W", function(x5)
      need_float(x5, name, "input")
      if x5:size(3) < k[1] or x5:size(4) < k[2] or x5:size(5) < k[3] then
        fail(string.format("%s: kernel_size %s is larger than the input %s", name, list_str(k), shape_str(x5)))
      end
      local a = F.avg_pool3d(x5:pow(norm_type), k, { stride = s, ceil_mode = opts.ceil_mode == true })
      return (a:sign() * a:abs():relu()):mul(k[1] * k[2] * k[3]):pow(1 / norm_type)
    end))
  end

  --- nn.LPPool1d(norm_type, kernel_size, stride = kernel_size, ceil_mode = false),
  -- nn.LPPool2d(...) and nn.LPPool3d(...): F.lp_pool1d/2d/3d as modules.
  -- @usage local pool = nn.LPPool2d(2, 3, 2)
  for n = 1, 3 do
    local cname = "LPPool" .. n .. "d"
    local fn = ({ F.lp_pool1d, F.lp_pool2d, F.lp_pool3d })[n]
    local cls = Module:extend(cname)
    function cls:init(norm_type, kernel_size, stride, ceil_mode)
      self.norm_type = need_norm_type(norm_type, cname)
      self.kernel_size = sizes(kernel_size, n, cname, "kernel_size", 1)
      self.stride = stride ~= nil and sizes(stride, n, cname, "stride", 1) or nil
      self.ceil_mode = ceil_mode == true
    end
    function cls:forward(x)
      return fn(x, self.norm_type, self.kernel_size, { stride = self.stride, ceil_mode = self.ceil_mode })
    end
    function cls:extra_repr()
      local function t(v) return n == 1 and tostring(v[1]) or tuple(v) end
      return string.format("norm_type=%g, kernel_size=%s, stride=%s, ceil_mode=%s", self.norm_type,
        t(self.kernel_size), t(self.stride or self.kernel_size), tostring(self.ceil_mode))
    end
    nn[cname] = cls
  end

  -- -- local response normalisation and channel shuffle ------------------------------------

  --- F.local_response_norm(x, size, {alpha = 1e-4, beta = 0.75, k = 1}) (or
  -- size, alpha, beta, k): x / (k + alpha / size * sum of x^2 over the size
  -- neighbouring channels)^beta, the window reaching size // 2 channels back
  -- and (size - 1) // 2 forward (zeros beyond the edges), as PyTorch's.
  -- @param x [N, C, *] with at least 3 dimensions
  -- @param size the number of channels in each window
  -- @return a tensor of x's shape
  -- @usage local y = F.local_response_norm(x, 5, { alpha = 1e-4, beta = 0.75, k = 2 })
  function F.local_response_norm(x, size, alpha, beta, k)
    local name = "local_response_norm"
    if type(alpha) == "table" then
      local o = options(alpha, name, { alpha = true, beta = true, k = true })
      alpha, beta, k = o.alpha, o.beta, o.k
    end
    need_float(x, name, "input")
    if x:dim() < 3 then
      fail(string.format("%s: expects an input of at least 3 dimensions (N, C, ...), got shape %s", name,
        shape_str(x)))
    end
    positive(size, name, "size")
    alpha, beta, k = alpha == nil and 1e-4 or alpha, beta == nil and 0.75 or beta, k == nil and 1 or k
    for _, v in ipairs { { alpha, "alpha" }, { beta, "beta" }, { k, "k" } } do
      if type(v[1]) ~= "number" or v[1] ~= v[1] then
        fail(string.format("%s: %s must be a number, got %s", name, v[2], tostring(v[1])))
      end
    end
    if x:numel() == 0 then return x end
    local n, c = x:size(1), x:size(2)
    local sq = (x * x):reshape(n, 1, c, x:numel() / (n * c))
    sq = F.pad(sq, { 0, 0, floor(size / 2), floor((size - 1) / 2) })
    local div = F.avg_pool2d(sq, { size, 1 }, { stride = 1 }):reshape(x:shape())
    return x / (div * alpha + k):pow(beta)
  end

  --- nn.LocalResponseNorm(size, alpha = 1e-4, beta = 0.75, k = 1): F.local_response_norm as a module.
  -- @usage local lrn = nn.LocalResponseNorm(5)
  local LocalResponseNorm = Module:extend("LocalResponseNorm")
  function LocalResponseNorm:init(size, alpha, beta, k)
    if type(alpha) == "table" then alpha, beta, k = alpha.alpha, alpha.beta, alpha.k end
    positive(size, "LocalResponseNorm", "size")
    self.size, self.alpha, self.beta, self.k = size, alpha or 1e-4, beta or 0.75, k or 1
  end
  function LocalResponseNorm:forward(x) return F.local_response_norm(x, self.size, self.alpha, self.beta, self.k) end
  function LocalResponseNorm:extra_repr()
    return string.format("%d, alpha=%g, beta=%g, k=%g", self.size, self.alpha, self.beta, self.k)
  end
  nn.LocalResponseNorm = LocalResponseNorm

  --- F.channel_shuffle(x, groups): splits the C channels of x [N, C, *] into
  -- groups and interleaves them (channel g * C/groups + j goes to j * groups + g),
  -- as ShuffleNet's and torch.nn.functional.channel_shuffle.
  -- @param x [N, C, *], at least 3 dimensions, C divisible by groups
  -- @usage local y = F.channel_shuffle(x, 2)
  function F.channel_shuffle(x, groups)
    local name = "channel_shuffle"
    need_tensor(x, name, "input")
    positive(groups, name, "groups")
    if x:dim() < 3 then
      fail(string.format("%s: expects an input of at least 3 dimensions (N, C, *), got shape %s", name, shape_str(x)))
    end
    local shape = x:shape()
    local c = shape[2]
    if c % groups ~= 0 then
      fail(string.format("%s: the %d channels of input %s are not divisible by groups %d", name, c, shape_str(x),
        groups))
    end
    local rest = 1
    for i = 3, #shape do rest = rest * shape[i] end
    return x:reshape(shape[1], groups, c / groups, rest):transpose(2, 3):reshape(shape)
  end

  --- nn.ChannelShuffle(groups): F.channel_shuffle as a module.
  -- @usage local shuffle = nn.ChannelShuffle(2)
  local ChannelShuffle = Module:extend("ChannelShuffle")
  function ChannelShuffle:init(groups) self.groups = positive(groups, "ChannelShuffle", "groups") end
  function ChannelShuffle:forward(x) return F.channel_shuffle(x, self.groups) end
  function ChannelShuffle:extra_repr() return "groups=" .. self.groups end
  nn.ChannelShuffle = ChannelShuffle
end
