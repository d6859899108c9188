--- tide.amp: mixed precision, as torch.amp. autocast runs a function with the
-- runtime's autocast on (runtime/src/ops/autocast.c): matrix products and
-- convolutions on the chosen kind of device take float16 or bfloat16 inputs,
-- ops that need range or precision (exp, log, pow, softmax, sums, cumulative
-- sums, linear algebra) take float32, the rest run on what they are given.
-- Casts are recorded (differentiable) copies, and backward runs without
-- autocast, in the forward's dtypes: call backward outside or inside, alike.
--
--     local loss = tide.autocast({ device_type = "cuda", dtype = "float16" }, function()
--       return loss_fn(model(x), y)
--     end)
--     loss:backward()
--
-- With float16, scale the loss so small gradients do not flush to zero
-- (tide.amp.GradScaler: scaler:scale(loss):backward(); scaler:step(opt);
-- scaler:update()).
--
-- Lua has no `with`, so the region is a function; its results are returned.
-- Defaults: the default device's kind; float16 on CUDA, bfloat16 on the CPU
-- (as PyTorch's). { enabled = false } turns autocast off inside a region.
-- Weights (leaves that require grad) are cast once per version within a
-- region, as PyTorch caches them; the cache is dropped when the outermost
-- region ends.
local B = require "bindings.ffi"
local T = require "tide.tensor"
local ffi, C = B.ffi, B.C
local fail, raise = B.fail, B.raise

local M = {}

local kinds = { cpu = C.TIDE_DEVICE_CPU, cuda = C.TIDE_DEVICE_CUDA }
local defaults = { cpu = "bfloat16", cuda = "float16" }
local lows = { float16 = C.TIDE_DTYPE_F16, half = C.TIDE_DTYPE_F16, bfloat16 = C.TIDE_DTYPE_BF16 }

local function kind_of(device_type, api)
  if device_type == nil then
    device_type = require("tide").get_default_device():match("^(%a+)")
  end
  local k = kinds[device_type]
  if k == nil then
    fail(string.format("%s: device_type must be \"cpu\" or \"cuda\", got %s", api, tostring(device_type)))
  end
  return k, device_type
end

--- autocast([opts,] fn, ...): fn(...) with autocast on; returns its results.
-- opts: { device_type = "cuda"|"cpu", dtype = "float16"|"bfloat16", enabled = true }
-- or just the device type as a string.
-- @usage local y = tide.autocast("cpu", function() return model(x) end)
function M.autocast(opts, fn, ...)
  if type(opts) == "function" then return M.autocast({}, opts, fn, ...) end
  if type(opts) == "string" then opts = { device_type = opts } end
  if type(opts) ~= "table" then fail("autocast: argument 1 must be an options table, a device type or a function") end
  if type(fn) ~= "function" then fail("autocast: expects a function to run, got " .. type(fn)) end
  local kind, name = kind_of(opts.device_type, "autocast")
  local dtype = -1
  if opts.enabled ~= false then
    local dn = opts.dtype or defaults[name]
    dtype = lows[dn]
    if dtype == nil then
      fail(string.format("autocast: dtype must be \"float16\" or \"bfloat16\", got %s", tostring(dn)))
    end
  end
  local prev = C.tide_autocast_set(kind, dtype)
  if prev == -2 then raise() end
  local r = { pcall(fn, ...) }
  C.tide_autocast_set(kind, prev)
  if not r[1] then error(r[2], 0) end
  return unpack(r, 2, table.maxn(r))
end

--- is_autocast_enabled([device_type]): whether autocast is on for that kind of device.
function M.is_autocast_enabled(device_type)
  return C.tide_autocast_get((kind_of(device_type, "is_autocast_enabled"))) >= 0
end

--- get_autocast_dtype([device_type]): the dtype autocast casts products to there
-- (the default when it is off).
function M.get_autocast_dtype(device_type)
  local kind, name = kind_of(device_type, "get_autocast_dtype")
  local d = C.tide_autocast_get(kind)
  if d < 0 then return defaults[name] end
  return T.dtype_names[d]
end

--- clear_autocast_cache(): drops the cached casts of weights now.
function M.clear_autocast_cache() C.tide_autocast_clear_cache() end

--- GradScaler: loss scaling for float16 training (lua/tide/amp_scaler.lua).
M.GradScaler = require("tide.amp_scaler").GradScaler

return M
