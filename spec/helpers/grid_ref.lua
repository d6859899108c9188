--- PyTorch's grid_sample and affine_grid coordinate rules, in plain Lua, for
-- the references of the 2-d and 3-d specs (nn_functional_extra, nn_3d_extra).
local floor, abs = math.floor, math.abs

local G = {}

--- Round half to even, as C's nearbyint (grid_sample's nearest mode).
function G.rint(v)
  local f = floor(v)
  local d = v - f
  if d > 0.5 then return f + 1 elseif d < 0.5 then return f end
  return f % 2 == 0 and f or f + 1
end

local function clip(v, n) return math.min(n - 1, math.max(v, 0)) end

--- A grid value g in [-1, 1] as a pixel coordinate in a dim of n.
function G.unnormalize(g, n, ac) return ac and (g + 1) / 2 * (n - 1) or ((g + 1) * n - 1) / 2 end

--- PyTorch's reflect_coordinates then clip (compute_coordinates) of coordinate c in a dim of n.
function G.fold(c, n, pad, ac)
  if pad == "border" then return clip(c, n) end
  if pad == "reflection" then
    local lo2, hi2 = ac and 0 or -1, ac and 2 * (n - 1) or 2 * n - 1
    if lo2 == hi2 then return 0 end
    local mn, span = lo2 / 2, (hi2 - lo2) / 2
    local a = abs(c - mn)
    local extra = math.fmod(a, span)
    c = floor(a / span) % 2 == 0 and extra + mn or span - extra + mn
    return clip(c, n)
  end
  return c
end

--- PyTorch's grid_sampler_compute_source_index.
function G.source(g, n, pad, ac) return G.fold(G.unnormalize(g, n, ac), n, pad, ac) end

--- affine_grid's base coordinate of pixel j (1-based) of n.
function G.base(j, n, ac)
  if n == 1 then return 0 end
  local v = -1 + 2 * (j - 1) / (n - 1)
  return ac and v or v * (n - 1) / n
end

return G
