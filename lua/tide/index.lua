--- tide.index: Torch7-style indexing of tensors. t[i] selects along the
-- first dimension (a Lua number for a 1-d tensor, but a 0-d tensor, a copy,
-- when t requires grad and grad mode is on, as PyTorch gives: a number would
-- drop the gradient without a word); t[{ {1, 3}, 2 }] takes an
-- inclusive range or an index per dimension ({} or ":" keeps a whole
-- dimension); t[mask] selects by a bool tensor and t[idx] by an index tensor.
-- Assignment through the same forms fills or copies into the view.
local T = require "tide.tensor"
local B = require "bindings.ffi"
local fail, C = B.fail, B.C
local methods, is_tensor = T.methods, T.is_tensor

local M = {}

-- The view that an index table names, dimension by dimension.
local function view_of(t, key)
  if #key > t.ndim then
    fail(string.format("index: %d indices given for a %d-d tensor", #key, t.ndim))
  end
  local v, d = t, 1
  for i = 1, #key do
    local k = key[i]
    if type(k) == "number" then
      v = methods.select(v, d, k)               -- drops the dimension
    elseif k == ":" or (type(k) == "table" and k[1] == nil) then
      d = d + 1
    elseif type(k) == "table" then
      local n = tonumber(v.sizes[d - 1])
      local a, b = k[1], k[2] or k[1]
      if type(a) ~= "number" or type(b) ~= "number" then
        fail(string.format("index: range for dimension %d must be {first, last}", i))
      end
      if a < 0 then a = n + a + 1 end
      if b < 0 then b = n + b + 1 end
      if a < 1 or b > n or b < a - 1 then
        fail(string.format("index: range {%d, %d} is out of bounds for dimension %d of size %d",
          k[1], k[2] or k[1], i, n))
      end
      v = methods.narrow(v, d, a, b - a + 1)
      d = d + 1
    else
      fail(string.format("index: element %d of the index must be a number, a {first, last} range or {}, got %s",
        i, type(k)))
    end
  end
  return v
end

function M.get(t, k)
  if type(k) == "number" then
    if t.ndim == 1 then
      local n = tonumber(t.sizes[0])
      if k == 0 or k > n or k < -n or k ~= math.floor(k) then
        fail(string.format("index: index %s is out of range for a tensor of size %d", tostring(k), n))
      end
      local e = methods.select(t, 1, k)
      -- a copy, not a view: a value, as the number was, that a later write into t leaves alone
      if C.tide_autograd_is_enabled() ~= 0 and C.tide_tensor_requires_grad(t) ~= 0 then return methods.clone(e) end
      return methods.item(e)
    end
    return methods.select(t, 1, k)
  elseif type(k) == "table" then
    return view_of(t, k)
  elseif is_tensor(k) then
    if k:dtype() == "bool" then return methods.masked_select(t, k) end
    return methods.index_select(t, 1, k)
  end
  fail(string.format("index: cannot index a tensor with a %s", type(k)))
end

function M.set(t, k, v)
  if is_tensor(k) and k:dtype() == "bool" then
    if is_tensor(v) then v = v:item() end
    return methods.masked_fill_(t, k, v)
  end
  local view
  if type(k) == "number" then
    view = methods.select(t, 1, k)
  elseif type(k) == "table" then
    view = view_of(t, k)
  elseif is_tensor(k) then
    fail("index: assigning through an index tensor is not supported; use index_copy_ or scatter_")
  else
    fail(string.format("index: cannot assign to a tensor indexed by a %s", type(k)))
  end
  if is_tensor(v) then methods.copy_(view, v) else methods.fill_(view, v) end
end

return M
