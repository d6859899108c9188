--- tide.nn's spatial transformer: affine_grid and grid_sample, 2-d (4-d
-- input; bilinear, nearest and bicubic) and 3-d (5-d input; trilinear, which
-- PyTorch calls bilinear, and nearest), as torch.nn.functional has them.
-- Composed of gathers and elementwise ops that autograd differentiates, so no
-- host reads; the padding modes fold the coordinates as PyTorch's kernels do.
-- Called once by tide.nn with the nn table.
local tide = require "tide"
local B = require "bindings.ffi"
local args = require "tide.args"
local helpers = require "tide.nn.helpers"
local fail = B.fail

return function(nn)
  local F = nn.functional
  local shape_str, is_int, need_float = args.shape_str, args.is_int, args.need_float
  local options, need_bool, list_str = args.options, args.need_bool, args.list_str
  local on = helpers.on

  -- -- affine_grid --------------------------------------------------------------------

  -- n points from -1 to 1 (the pixels' centres scaled by (n - 1) / n without
  -- align_corners; one point is 0), as PyTorch's affine_grid base.
  local function base_line(n, align_corners, o)
    if n <= 1 then return tide.zeros({ n }, o) end
    local l = tide.linspace(-1, 1, n, o)
    if not align_corners then l = l * ((n - 1) / n) end
    return l
  end

  --- F.affine_grid(theta, size, align_corners): the sampling grid of affine
  -- transforms for F.grid_sample. 2-d: size {N, C, H, W}, theta [N, 2, 3],
  -- grid[n, h, w] = theta[n] (x_w, y_h, 1); 3-d: size {N, C, D, H, W}, theta
  -- [N, 3, 4], grid[n, d, h, w] = theta[n] (x_w, y_h, z_d, 1). The x_w, y_h and
  -- z_d span [-1, 1] over the output's W, H and D (the pixels' corners with
  -- align_corners, else their centres). Differentiable in theta.
  -- @param theta [N, 2, 3] or [N, 3, 4], floating point
  -- @param size {N, C, H, W} or {N, C, D, H, W}, the output's size
  -- @param align_corners default false
  -- @return [N, H, W, 2] or [N, D, H, W, 3]
  -- @usage local grid = F.affine_grid(theta, { 1, 3, 32, 32 }, false)
  function F.affine_grid(theta, size, align_corners)
    local name = "affine_grid"
    need_float(theta, name, "theta")
    if type(size) ~= "table" or (#size ~= 4 and #size ~= 5) then
      fail(string.format("%s: size must be a table {N, C, H, W} or {N, C, D, H, W}, got %s",
        name, type(size) == "table" and ("a table of " .. #size) or tostring(size)))
    end
    for i = 1, #size do
      if not is_int(size[i]) or size[i] < (i == 1 and 0 or 1) then
        fail(string.format("%s: size must hold positive sizes (N may be 0), got %s", name, list_str(size)))
      end
    end
    need_bool(align_corners, name, "align_corners")
    local k = #size - 2   -- spatial dims
    local n = size[1]
    if theta:dim() ~= 3 or theta:size(1) ~= n or theta:size(2) ~= k or theta:size(3) ~= k + 1 then
      fail(string.format("%s: theta must be a batch of %d-d affine matrices [%d, %d, %d] for size %s, got shape %s",
        name, k, n, k, k + 1, list_str(size), shape_str(theta)))
    end
    local o = on(theta)
    -- the output's spatial sizes, in the order of the grid's components (x: W first)
    local sp, view = {}, {}
    for i = 1, k do sp[i] = size[#size - i + 1] end
    local cells, cols = 1, {}
    for i = 1, k do cells = cells * sp[i] end
    local shape = {}
    for i = 1, k do shape[i] = size[2 + i] end
    shape[k + 1] = 1
    for i = 1, k do
      for j = 1, k + 1 do view[j] = 1 end
      view[k - i + 1] = sp[i]
      cols[i] = base_line(sp[i], align_corners, o):view(view):expand(shape)
    end
    cols[k + 1] = tide.ones(shape, o)
    local base = tide.cat(cols, k + 1):reshape(1, cells, k + 1):expand(n, cells, k + 1)
    local out = { n }
    for i = 1, k do out[1 + i] = size[2 + i] end
    out[k + 2] = k
    return base:bmm(theta:transpose(2, 3)):view(out)
  end

  -- -- coordinates --------------------------------------------------------------------

  local SAMPLE_MODES = { bilinear = true, nearest = true, bicubic = true }
  local SAMPLE_PADDING = { zeros = true, border = true, reflection = true }

  -- c clamped to [0, hi], with the gradient passing only strictly inside
  -- (PyTorch's clip_coordinates_set_grad).
  local function clip(c, hi)
    return tide.where(c:le(0), 0, tide.where(c:ge(hi), hi, c))
  end

  -- c reflected into [lo2 / 2, hi2 / 2] by the bounds' mirrors, as PyTorch's
  -- reflect_coordinates (the gradient's sign flipping with each reflection).
  local function reflect(c, lo2, hi2)
    if lo2 == hi2 then return c * 0 end
    local lo, span = lo2 / 2, (hi2 - lo2) / 2
    local d = c - lo
    local a = tide.where(d:lt(0), -d, d)
    local extra = a:fmod(span)
    local even = (a:detach() / span):floor():fmod(2):eq(0)
    return tide.where(even, extra + lo, -extra + (span + lo))
  end

  -- Grid coordinates g in [-1, 1] as pixel coordinates of a dimension of n
  -- (PyTorch's grid_sampler_unnormalize).
  local function unnormalize(g, n, align_corners)
    if align_corners then return (g + 1) * ((n - 1) / 2) end
    return ((g + 1) * n - 1) / 2
  end

  -- Pixel coordinates c folded by the padding mode (border, reflection), as
  -- PyTorch's compute_coordinates.
  local function pad_coords(c, n, padding_mode, align_corners)
    if padding_mode == "border" then return clip(c, n - 1) end
    if padding_mode == "reflection" then
      c = align_corners and reflect(c, 0, 2 * (n - 1)) or reflect(c, -1, 2 * n - 1)
      return clip(c, n - 1)
    end
    return c
  end

  -- PyTorch's cubic convolution weights (A = -0.75) of the four taps around a
  -- point t past the second one.
  local A = -0.75
  local function cubic_weights(t)
    local function near(x) return ((x * (A + 2) - (A + 3)) * x * x) + 1 end
    local function far(x) return ((x * A - 5 * A) * x + 8 * A) * x - 4 * A end
    return { far(t + 1), near(t), near(-t + 1), far(-t + 2) }
  end

  -- -- grid_sample --------------------------------------------------------------------

  -- Checks grid_sample's arguments; returns the options and k, the number of spatial dims.
  local function check(input, grid, opts)
    local name = "grid_sample"
    opts = options(opts, name, { mode = true, padding_mode = true, align_corners = true })
    need_float(input, name, "input")
    need_float(grid, name, "grid")
    local mode, padding_mode = opts.mode or "bilinear", opts.padding_mode or "zeros"
    if not SAMPLE_MODES[mode] then
      fail(string.format("%s: mode must be 'bilinear', 'nearest' or 'bicubic', got %s", name, tostring(mode)))
    end
    if not SAMPLE_PADDING[padding_mode] then
      fail(string.format("%s: padding_mode must be 'zeros', 'border' or 'reflection', got %s", name,
        tostring(padding_mode)))
    end
    need_bool(opts.align_corners, name, "align_corners")
    local nd = input:dim()
    if (nd ~= 4 and nd ~= 5) or grid:dim() ~= nd then
      fail(string.format("%s: expects a 4-d input [N, C, H, W] and grid [N, oH, oW, 2], or a 5-d input " ..
        "[N, C, D, H, W] and grid [N, oD, oH, oW, 3], got %s and %s", name, shape_str(input), shape_str(grid)))
    end
    local k = nd - 2
    if mode == "bicubic" and k == 3 then
      fail(string.format("%s: mode 'bicubic' samples 4-d input only, got input %s", name, shape_str(input)))
    end
    if input:dtype() ~= grid:dtype() then
      fail(string.format("%s: input (%s) and grid (%s) must have the same dtype", name, input:dtype(), grid:dtype()))
    end
    if grid:size(1) ~= input:size(1) or grid:size(nd) ~= k then
      fail(string.format("%s: grid of shape %s does not match input of shape %s (expected [%d, %s, %d])", name,
        shape_str(grid), shape_str(input), input:size(1), k == 2 and "oH, oW" or "oD, oH, oW", k))
    end
    for i = 3, nd do
      if input:size(i) < 1 then
        fail(string.format("%s: input %s has an empty spatial dimension", name, shape_str(input)))
      end
    end
    return mode, padding_mode, opts.align_corners == true, k
  end

  --- F.grid_sample(input, grid, {mode = "bilinear", padding_mode = "zeros",
  -- align_corners = false}): samples input at the grid's points, as
  -- torch.nn.functional.grid_sample. 2-d: grid[n, h, w] = (x, y); 3-d:
  -- grid[n, d, h, w] = (x, y, z); each in [-1, 1] spans the input's W, H (and
  -- D): the corner pixels' centres with align_corners, else their outer
  -- edges. Points outside read zeros, the border's values, or the input
  -- reflected at its borders. mode "bilinear" is trilinear on 5-d input;
  -- "bicubic" (4-d only) takes 4 x 4 taps, each folded by the padding mode.
  -- Differentiable in input and grid (nearest gives grid no gradient).
  -- @param input [N, C, H, W] or [N, C, D, H, W], floating point
  -- @param grid [N, oH, oW, 2] or [N, oD, oH, oW, 3], of input's dtype
  -- @param opts {mode = "bilinear" | "nearest" | "bicubic", padding_mode = "zeros" | "border" | "reflection",
  -- align_corners = false}
  -- @return [N, C, oH, oW] or [N, C, oD, oH, oW]
  -- @usage local out = F.grid_sample(img, F.affine_grid(theta, img:shape()))
  function F.grid_sample(input, grid, opts)
    local mode, padding_mode, ac, k = check(input, grid, opts)
    local n, c = input:size(1), input:size(2)
    -- sizes[i]: the input's size along grid component i (x: W, y: H, z: D)
    local sizes, cells, p = {}, 1, 1
    for i = 1, k do
      sizes[i] = input:size(k + 3 - i)
      cells = cells * sizes[i]
      p = p * grid:size(1 + i)
    end
    local coords = {}
    for i = 1, k do
      local g = unnormalize(grid:select(k + 2, i):reshape(n, 1, p), sizes[i], ac)
      coords[i] = mode == "bicubic" and g or pad_coords(g, sizes[i], padding_mode, ac)
    end
    local flat = input:reshape(n, c, cells)
    -- input's values [N, C, P] at the integer points pts[i] [N, 1, P] (float,
    -- detached), 0 outside (or at NaN); the flat index is made in int64, exact for any size
    local function read(pts)
      local inside, at, stride
      for i = 1, k do
        local ok = pts[i]:ge(0):logical_and(pts[i]:le(sizes[i] - 1))
        inside = inside and inside:logical_and(ok) or ok
      end
      for i = 1, k do
        local term = tide.where(inside, pts[i], 0):long()
        if i > 1 then term = term * stride end
        at = at and at + term or term
        stride = (stride or 1) * sizes[i]
      end
      return tide.where(inside, flat:gather(3, (at + 1):expand(n, c, p)), 0)
    end
    local out
    if mode == "nearest" then
      local pts = {}
      for i = 1, k do pts[i] = coords[i]:detach():round() end
      out = read(pts)
    elseif mode == "bicubic" then
      local x0, y0 = coords[1]:detach():floor(), coords[2]:detach():floor()
      local wx, wy = cubic_weights(coords[1] - x0), cubic_weights(coords[2] - y0)
      -- each tap folded by the padding mode, as PyTorch's get_value_bounded
      local function tap(x, y)
        return read { pad_coords(x, sizes[1], padding_mode, ac), pad_coords(y, sizes[2], padding_mode, ac) }
      end
      for j = 1, 4 do
        local row
        for i = 1, 4 do
          local term = tap(x0 + (i - 2), y0 + (j - 2)) * wx[i]
          row = row and row + term or term
        end
        out = out and out + row * wy[j] or row * wy[j]
      end
    else
      -- the 2^k corners; corner bit i picks the upper neighbour along component i
      local lo, hi, f, g = {}, {}, {}, {}
      for i = 1, k do
        lo[i] = coords[i]:detach():floor()
        hi[i] = lo[i] + 1
        f[i] = coords[i] - lo[i]   -- the weight of the upper neighbour, carrying grid's gradient
        g[i] = -f[i] + 1
      end
      for corner = 0, 2 ^ k - 1 do
        local pts, w = {}, nil
        for i = 1, k do
          local up = math.floor(corner / 2 ^ (i - 1)) % 2 == 1
          pts[i] = up and hi[i] or lo[i]
          local wi = up and f[i] or g[i]
          w = w and w * wi or wi
        end
        local term = read(pts) * w
        out = out and out + term or term
      end
    end
    local shape = { n, c }
    for i = 1, k do shape[2 + i] = grid:size(1 + i) end
    return out:view(shape)
  end
end
