--- tide.distance: pairwise distances, torch.cdist and torch.pdist, composed
-- of tensor ops so autograd, every device and tide.jit take them unchanged.
-- Where a distance is 0 its gradient is 0, as PyTorch's backward gives it
-- (the root's derivative at 0 is masked, not propagated as inf * 0).
-- Called once, by init.lua: require("tide.distance")(tide, methods).
local B = require "bindings.ffi"
local T = require "tide.tensor"
local fail, is_tensor = B.fail, T.is_tensor
local fmt = string.format

local function shape_str(t) return "[" .. table.concat(t:shape(), ",") .. "]" end

local function need_float(x, name, what)
  if not is_tensor(x) then fail(fmt("%s: %s must be a tensor, got %s", name, what, type(x))) end
  if not x:is_floating_point() then
    fail(fmt("%s: only floating-point tensors are supported, %s is %s", name, what, x:dtype()))
  end
  return x
end

local function need_p(p, name)
  if p == nil then return 2 end
  if type(p) ~= "number" or p ~= p or p < 0 then
    fail(fmt("%s: p must be a non-negative number, got %s", name, tostring(p)))
  end
  return p
end

-- r^(1/p) where r > 0, and 0 (with a zero gradient) where r == 0.
local function root(r, p)
  local pos = r:gt(0)
  local safe = T.functions.where(pos, r, 1)
  local v = p == 2 and safe:sqrt() or safe:pow(1 / p)
  return T.functions.where(pos, v, 0)
end

-- The p-norm of diff along its last dimension.
local function pnorm(diff, p)
  if p == 0 then return diff:ne(0):to(diff:dtype()):sum(-1) end
  if p == math.huge then return diff:abs():amax(-1) end
  if p == 1 then return diff:abs():sum(-1) end
  if p == 2 then return root((diff * diff):sum(-1), 2) end
  return root(diff:abs():pow(p):sum(-1), p)
end

local modes = { use_mm_for_euclid_dist_if_necessary = true, use_mm_for_euclid_dist = true,
  donot_use_mm_for_euclid_dist = true }

return function(tide, methods)
  --- cdist(x1, x2, p, compute_mode): the p-norm distance between each row of
  -- x1 [*, P, M] and each row of x2 [*, R, M] (the batch dimensions
  -- broadcast), as torch.cdist: [*, P, R]. p = 2 by default; 0 counts the
  -- differing features, math.huge takes the largest difference. For p = 2,
  -- compute_mode "use_mm_for_euclid_dist_if_necessary" (the default) uses the
  -- matrix-product expansion |a|^2 + |b|^2 - 2 a.b (clamped at 0) when P or R
  -- exceeds 25 and the difference form otherwise, as PyTorch does;
  -- "use_mm_for_euclid_dist" and "donot_use_mm_for_euclid_dist" force one.
  -- @return [*, P, R]
  -- @usage local d = tide.cdist(a, b)            -- [5,3] x [4,3] -> [5,4]
  function tide.cdist(x1, x2, p, compute_mode)
    need_float(x1, "cdist", "x1")
    need_float(x2, "cdist", "x2")
    p = need_p(p, "cdist")
    compute_mode = compute_mode or "use_mm_for_euclid_dist_if_necessary"
    if not modes[compute_mode] then
      fail(fmt("cdist: compute_mode must be 'use_mm_for_euclid_dist_if_necessary', 'use_mm_for_euclid_dist' or " ..
        "'donot_use_mm_for_euclid_dist', got %s", tostring(compute_mode)))
    end
    if x1:dim() < 2 or x2:dim() < 2 then
      fail(fmt("cdist: x1 and x2 must have at least 2 dimensions, got shapes %s and %s", shape_str(x1),
        shape_str(x2)))
    end
    if x1:size(-1) ~= x2:size(-1) then
      fail(fmt("cdist: x1 %s and x2 %s must have the same number of columns (%d ~= %d)", shape_str(x1),
        shape_str(x2), x1:size(-1), x2:size(-1)))
    end
    if x1:dtype() ~= x2:dtype() then
      fail(fmt("cdist: x1 and x2 must have the same dtype, got %s and %s", x1:dtype(), x2:dtype()))
    end
    local pr, rr = x1:size(-2), x2:size(-2)
    local use_mm = p == 2 and (compute_mode == "use_mm_for_euclid_dist"
      or compute_mode == "use_mm_for_euclid_dist_if_necessary" and (pr > 25 or rr > 25))
    if use_mm then
      local n1 = (x1 * x1):sum(-1, true)                      -- [*, P, 1]
      local n2 = (x2 * x2):sum(-1, true):transpose(-1, -2)    -- [*, 1, R]
      local d2 = (n1 + n2 - x1:matmul(x2:transpose(-1, -2)) * 2):clamp_min(0)
      return root(d2, 2)
    end
    return pnorm(x1:unsqueeze(-2) - x2:unsqueeze(-3), p)   -- [*, P, 1, M] - [*, 1, R, M]
  end

  --- pdist(x, p): the p-norm distance between each pair of rows i < j of x
  -- [N, M], in row-major order of the pairs, as torch.pdist: [N * (N - 1) / 2].
  -- @usage local d = tide.pdist(points)   -- [4,3] -> [6]
  function tide.pdist(x, p)
    need_float(x, "pdist", "input")
    p = need_p(p, "pdist")
    if x:dim() ~= 2 then fail(fmt("pdist: input must be 2-d [N, M], got shape %s", shape_str(x))) end
    local n = x:size(1)
    local is, js = {}, {}
    for i = 1, n - 1 do
      for j = i + 1, n do is[#is + 1] = i; js[#js + 1] = j end
    end
    if #is == 0 then return tide.zeros({ 0 }, { dtype = x:dtype(), device = x:device() }) end
    local o = { dtype = "int64", device = x:device() }
    return pnorm(x:index_select(1, tide.tensor(is, o)) - x:index_select(1, tide.tensor(js, o)), p)
  end
  methods.cdist = methods.cdist or tide.cdist
  methods.pdist = methods.pdist or tide.pdist
end
