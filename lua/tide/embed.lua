--- tide.embed: tensors passed between a C host and Lua without copying data.
-- libtide_lua's tide_lua_push_tensor and tide_lua_to_tensor (tide_lua.h) call
-- these two functions; a Lua host may use them with pointers it got elsewhere.
-- Only the pointer crosses: both sides share the tensor and its storage.
local B = require "bindings.ffi"
local ffi, C = B.ffi, B.C
local is_tensor = require("tide.tensor").is_tensor

local M = {}

--- A Lua tensor for a `tide_tensor *` made by C code (a pointer cdata or a
-- lightuserdata). The pointer is borrowed: Lua takes its own reference.
-- @param p the C tensor
-- @return the tensor
-- @usage local t = require("tide.embed").adopt(ptr)
function M.adopt(p)
  local tp = type(p)
  if tp ~= "userdata" and tp ~= "cdata" then
    B.fail("adopt: argument 1 must be a tide_tensor pointer (lightuserdata or cdata), got " .. tp)
  end
  local t = ffi.cast("tide_tensor *", p)
  if t == nil then B.fail("adopt: argument 1 is a NULL pointer") end
  C.tide_tensor_retain(t)
  return B.wrap(t, 0)
end

--- Stores a new reference (+1) to tensor t at `slot`, a `tide_tensor **` given
-- as a lightuserdata or cdata; the C side releases it.
-- @param t a tensor
-- @param slot where to store the pointer
-- @return true, or false (storing nothing) if t is not a tensor
function M.export(t, slot)
  if not is_tensor(t) then return false end
  C.tide_tensor_retain(t)
  ffi.cast("tide_tensor **", slot)[0] = t
  return true
end

return M
