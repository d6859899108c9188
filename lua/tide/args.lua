--- tide.args: the argument checks that tide's Lua modules share, each raising
-- (through bindings' fail, at the user's line) "name: what must be ..., got ...".
-- Only checks whose message is the same wherever they are used live here; a
-- module whose message differs keeps its own check.
local B = require "bindings.ffi"
local T = require "tide.tensor"
local fail, is_tensor = B.fail, T.is_tensor
local fmt, floor = string.format, math.floor

local M = {}

--- Whether v is a number holding an integer that a double represents exactly.
function M.is_int(v) return type(v) == "number" and v == floor(v) and v > -2^53 and v < 2^53 end

--- v, checked to be an integer (is_int), and at least lo where lo is given
-- (0: "a non-negative integer", 1: "a positive integer").
function M.need_int(v, name, what, lo)
  if not M.is_int(v) or (lo and v < lo) then
    fail(fmt("%s: %s must be %s integer, got %s", name, what,
      lo == 0 and "a non-negative" or lo == 1 and "a positive" or "an", tostring(v)))
  end
  return v
end

--- v, checked to be a positive integer.
function M.positive(v, name, what) return M.need_int(v, name, what, 1) end

--- A tensor's shape as "[2,3]".
function M.shape_str(t) return "[" .. table.concat(t:shape(), ",") .. "]" end

--- A list of numbers as "{2, 3}".
function M.list_str(l) return "{" .. table.concat(l, ", ") .. "}" end

--- opts checked to be nil (giving {}) or a table; with `known` (a set of
-- keys) also that it has no other key.
-- @usage opts = args.options(opts, "conv1d", { stride = true, padding = true })
function M.options(opts, name, known)
  if opts == nil then return {} end
  if type(opts) ~= "table" then fail(fmt("%s: options must be a table, got %s", name, type(opts))) end
  if known then
    for k in pairs(opts) do
      if not known[k] then fail(fmt("%s: unknown option '%s'", name, tostring(k))) end
    end
  end
  return opts
end

--- x, checked to be a tensor: `what` names the argument of `name` ("input"),
-- or gives its position ("argument 2"; nil: 1).
function M.need_tensor(x, name, what)
  if not is_tensor(x) then
    local arg = type(what) == "string" and what or fmt("argument %d", what or 1)
    fail(fmt("%s: %s must be a tensor, got %s", name, arg, type(x)))
  end
  return x
end

--- Checks that x (the argument `what` of `name`) is a floating-point tensor.
function M.need_float(x, name, what)
  M.need_tensor(x, name, what)
  if not x:is_floating_point() then
    fail(fmt("%s: %s must be a floating-point tensor, got %s", name, what, x:dtype()))
  end
end

--- v as a boolean: nil is false; anything else but a boolean is an error.
function M.need_bool(v, name, what)
  if v ~= nil and type(v) ~= "boolean" then fail(fmt("%s: %s must be a boolean, got %s", name, what, type(v))) end
  return v == true
end

return M
