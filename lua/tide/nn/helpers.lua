--- tide.nn.helpers: what the spatial modules (spatial.lua, spatial_extra.lua,
-- spatial3d.lua) share: running on unbatched input, sizes given as an integer
-- or a table, return_indices, empty spatial dims. The argument checks of all
-- of tide are in tide.args; what one file alone needs stays in that file.
local B = require "bindings.ffi"
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

return M
