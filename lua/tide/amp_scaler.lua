--- tide.amp.GradScaler: loss scaling for mixed-precision training, as
-- torch.amp.GradScaler. The scale, the growth tracker and the inf/NaN flags
-- live in 0-d tensors, updated by engine ops, so scale(), unscale_() and
-- update() read nothing to the host; step() reads the flags once, to decide
-- whether the optimizer steps. autocast itself is tide.amp's (amp.lua).
--
--     local scaler = GradScaler()
--     for _ = 1, steps do
--       opt:zero_grad()
--       scaler:scale(loss_fn()):backward()
--       scaler:step(opt)
--       scaler:update()
--     end
--
-- Unlike PyTorch, unscale_ accepts float16 gradients (PyTorch refuses them):
-- it unscales them in float32 and rounds once.
local B = require "bindings.ffi"
local T = require "tide.tensor"
local autograd = require "tide.autograd"
local Optimizer = require "tide.optim.optimizer"
local fail, is_tensor, methods = B.fail, T.is_tensor, T.methods
local fmt = Optimizer.fmt

-- tide (init.lua) may require this module while it loads, so it is looked up at call time.
local tide_module
local function tide()
  tide_module = tide_module or require "tide"
  return tide_module
end

local GradScaler = {}
GradScaler.__index = GradScaler

-- Where each optimizer is between two update() calls (PyTorch's OptState).
local READY, UNSCALED, STEPPED = "ready", "unscaled", "stepped"

local defaults = { init_scale = 2 ^ 16, growth_factor = 2, backoff_factor = 0.5, growth_interval = 2000,
                   enabled = true }

-- The options' rules: each returns whether v passes, and what it must be.
-- The tracker is int32, as PyTorch's, hence the bound on growth_interval.
local rules = {
  init_scale = function(v) return type(v) == "number" and v > 0 and v < math.huge, "a positive finite number" end,
  growth_factor = function(v) return type(v) == "number" and v > 1 and v < math.huge, "a finite number > 1" end,
  backoff_factor = function(v) return type(v) == "number" and v > 0 and v < 1, "a number in (0, 1)" end,
  growth_interval = function(v)
    return type(v) == "number" and v >= 1 and v < 2 ^ 31 and v == math.floor(v), "a positive integer"
  end,
  enabled = function(v) return type(v) == "boolean", "a boolean" end,
  _growth_tracker = function(v)
    return type(v) == "number" and v >= 0 and v < 2 ^ 31 and v == math.floor(v), "a non-negative integer"
  end,
}
rules.scale, rules.new_scale = rules.init_scale, rules.init_scale

-- api: "" or "set_growth_factor: "; raises unless v passes key's rule.
local function check_option(api, key, v)
  local ok, want = rules[key](v)
  if not ok then fail(string.format("GradScaler: %s%s must be %s, got %s", api, key, want, fmt(v))) end
  return v
end

local function check_optimizer(opt, api)
  if not Optimizer.is_optimizer(opt) then
    fail(string.format("GradScaler: %s: expects an optimizer, got %s", api,
      is_tensor(opt) and "a tensor" or type(opt)))
  end
end

--- GradScaler([device,] {init_scale = 2^16, growth_factor = 2,
-- backoff_factor = 0.5, growth_interval = 2000, enabled = true}).
-- device ("cuda" or "cpu") is accepted as torch.amp.GradScaler takes it and
-- only checked: the scale is made on the device of the first output scaled.
-- @param device optional "cuda" or "cpu"
-- @param opts optional options table
-- @return the scaler
-- @usage local scaler = tide.amp.GradScaler("cuda", { init_scale = 2^12 })
function GradScaler.new(device, opts)
  if type(device) == "table" and opts == nil then device, opts = nil, device end
  if device ~= nil and type(device) ~= "string" then
    fail(string.format("GradScaler: argument 1 must be a device (\"cuda\" or \"cpu\") or an options table, got %s",
      type(device)))
  end
  if device ~= nil and device ~= "cuda" and device ~= "cpu" then
    fail(string.format("GradScaler: device must be \"cuda\" or \"cpu\", got %s", fmt(device)))
  end
  if opts ~= nil and type(opts) ~= "table" then
    fail(string.format("GradScaler: options must be a table, got %s", type(opts)))
  end
  opts = opts or {}
  for k in pairs(opts) do
    if defaults[k] == nil then fail(string.format("GradScaler: unknown option %s", fmt(k))) end
  end
  local self = setmetatable({}, GradScaler)
  for _, key in ipairs { "init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled" } do
    local v = opts[key]
    if v == nil then v = defaults[key] end
    self["_" .. key] = check_option("", key, v)
  end
  self._init_growth_tracker = 0
  -- _scale, _growth_tracker (0-d tensors) and _dev (their device) are made by the first scale()
  self._scales = {}   -- device -> the scale there; a copy where it is not _dev
  self._per_opt = setmetatable({}, { __mode = "k" })
  return self
end
setmetatable(GradScaler, { __call = function(_, ...) return GradScaler.new(...) end })

-- -- the scale on each device -----------------------------------------------------------------

function GradScaler:_lazy_init(dev)
  local t = tide()
  self._scale = t.full({}, self._init_scale, { dtype = "float32", device = dev })
  self._growth_tracker = t.full({}, self._init_growth_tracker, { dtype = "int32", device = dev })
  self._dev = dev
  self._scales = { [dev] = self._scale }
end

-- The scale on dev; the copies are dropped whenever the scale changes.
function GradScaler:_scale_on(dev)
  local s = self._scales[dev]
  if s == nil then
    s = methods.to(self._scale, dev)
    self._scales[dev] = s
  end
  return s
end

function GradScaler:_scale_changed()
  self._scales = { [self._dev] = self._scale }
end

function GradScaler:_check_scale(api)
  if self._scale == nil then
    fail(string.format("GradScaler: %s: there is no scale yet; call scaler:scale(loss) earlier in the iteration", api))
  end
end

-- The state of opt since the last update(): its stage and its inf flags per device.
function GradScaler:_opt_state(opt)
  local st = self._per_opt[opt]
  if st == nil then
    st = { stage = READY, found_inf = {} }
    self._per_opt[opt] = st
  end
  return st
end

-- -- scale, unscale_, step ------------------------------------------------------------------

local function scale_tensor(self, t)
  local dev = methods.device(t)
  if self._scale == nil then self:_lazy_init(dev) end
  return t * self:_scale_on(dev)   -- a 0-d operand does not promote: a float16 loss stays float16
end

local function scale_all(self, x)
  if is_tensor(x) then return scale_tensor(self, x) end
  if type(x) ~= "table" then
    fail(string.format("GradScaler: scale: expects a tensor or a table of tensors, got %s", type(x)))
  end
  local r = {}
  for k, v in pairs(x) do r[k] = scale_all(self, v) end
  return r
end

--- Multiplies outputs (usually the loss) by the scale, recorded for backward.
-- The scale is made on the first output's device, and copied to others.
-- A disabled scaler returns outputs unchanged.
-- @param outputs a tensor, or a table (nested or not) of tensors
-- @return the scaled tensor, or a table of them with the same keys
-- @usage scaler:scale(loss):backward()
function GradScaler:scale(outputs)
  if not self._enabled then return outputs end
  return scale_all(self, outputs)
end

-- Unscales every gradient of opt in place and returns device -> 0-d float32
-- flag (1 where a gradient had an inf or NaN before unscaling, as PyTorch checks).
function GradScaler:_unscale_grads(opt)
  local inv, found = {}, {}
  local zeros = tide().zeros
  for _, group in ipairs(opt.param_groups) do
    for _, p in ipairs(group.params) do
      local g = p.grad
      if g ~= nil then
        local dev = methods.device(g)
        if inv[dev] == nil then
          -- the reciprocal in float64 then rounded, as PyTorch's inv_scale
          inv[dev] = methods.float(methods.reciprocal(methods.double(self:_scale_on(dev))))
          found[dev] = zeros({}, { dtype = "float32", device = dev })
        end
        local d = methods.sub(g, g)   -- inf - inf and NaN - NaN are NaN, the rest 0
        methods.maximum_(found[dev], methods.any(methods.ne(d, 0)))
        local dt = methods.dtype(g)
        if dt == "float32" or dt == "float64" then
          methods.mul_(g, inv[dev])
        else   -- float16, bfloat16: multiply in float32, round once
          methods.copy_(g, methods.mul(methods.float(g), inv[dev]))
        end
      end
    end
  end
  return found
end

--- Divides the gradients of opt's parameters by the scale, in place (float32
-- arithmetic for float16 and bfloat16 gradients), and records whether any was
-- inf or NaN, in tensors: no host read. Call it before clipping gradients;
-- step() calls it when it was not called. Once per optimizer between two update()s.
-- A disabled scaler does nothing.
-- @param opt the optimizer
-- @usage scaler:unscale_(opt); tide.nn.utils.clip_grad_norm_(params, 1.0); scaler:step(opt)
function GradScaler:unscale_(opt)
  if not self._enabled then return end
  check_optimizer(opt, "unscale_")
  self:_check_scale("unscale_")
  local st = self:_opt_state(opt)
  if st.stage == UNSCALED then
    fail("GradScaler: unscale_() has already been called on this optimizer since the last update()")
  elseif st.stage == STEPPED then
    fail("GradScaler: unscale_() is being called after step()")
  end
  st.found_inf = autograd.no_grad(self._unscale_grads, self, opt)
  st.stage = UNSCALED
end

-- The sum of the flags of found (device -> 0-d tensor) on dev; nil if found is empty.
local function total(found, dev)
  local sum
  for _, f in pairs(found) do
    f = methods.to(f, dev)
    sum = sum and sum + f or f
  end
  return sum
end

--- Unscales opt's gradients (unless unscale_ did), then steps opt with
-- opt:step(...) unless a gradient held an inf or NaN. Deciding that reads the
-- flags to the host: the one host read of an iteration, as in PyTorch.
-- Closures are refused (their gradients would stay scaled), as PyTorch does.
-- A disabled scaler just calls opt:step(...).
-- @param opt the optimizer
-- @param ... passed to opt:step
-- @return what opt:step returned, or nil when the step was skipped
-- @usage scaler:step(opt); scaler:update()
function GradScaler:step(opt, ...)
  check_optimizer(opt, "step")
  if not self._enabled then return opt:step(...) end
  if type((...)) == "function" then
    fail("GradScaler: step: a closure is not supported while the scaler is enabled: its gradients would stay scaled")
  end
  self:_check_scale("step")
  local st = self:_opt_state(opt)
  if st.stage == STEPPED then fail("GradScaler: step() has already been called since the last update()") end
  if st.stage == READY then self:unscale_(opt) end
  local dev = next(st.found_inf)
  if dev == nil then
    fail("GradScaler: step: no inf checks were recorded for this optimizer: none of its parameters has a gradient")
  end
  local r
  if methods.item(total(st.found_inf, dev)) == 0 then r = opt:step(...) end
  st.stage = STEPPED
  return r
end

-- -- update ----------------------------------------------------------------------------------

-- PyTorch's _amp_update_scale_, as engine ops: on an inf, scale *= backoff and
-- the tracker resets; else the tracker counts good steps and, at growth_interval,
-- resets and scale *= growth_factor (unless that overflows float32). The
-- products are taken in float64 and rounded once, as PyTorch's kernel does.
function GradScaler:_update_scale(found)
  local where = tide().where
  local scale, tracker = self._scale, self._growth_tracker
  local inf = methods.gt(found, 0)
  local s = methods.double(scale)
  local good = tracker + 1
  -- >= rather than PyTorch's ==: a loaded tracker past a smaller interval still grows
  local due = methods.ge(good, self._growth_interval)
  local grown = methods.float(s * self._growth_factor)
  local finite = methods.eq(methods.sub(grown, grown), 0)
  local kept = where(methods.logical_and(due, finite), grown, scale)
  methods.copy_(scale, where(inf, s * self._backoff_factor, kept))
  methods.copy_(tracker, where(methods.logical_or(inf, due), 0, good))
end

--- Updates the scale for the next iteration: backs off (scale *= backoff_factor)
-- if any optimizer stepped since the last update() saw an inf or NaN, else
-- grows it (scale *= growth_factor) after growth_interval good steps in a row.
-- new_scale sets the scale instead. Engine ops only: no host read. A disabled
-- scaler does nothing.
-- @param new_scale optional number or one-element tensor
-- @usage scaler:step(opt); scaler:update()
function GradScaler:update(new_scale)
  if not self._enabled then return end
  self:_check_scale("update")
  if new_scale ~= nil then
    if type(new_scale) == "number" then
      check_option("update: ", "new_scale", new_scale)
      methods.fill_(self._scale, new_scale)
    elseif is_tensor(new_scale) and methods.numel(new_scale) == 1 and not new_scale.requires_grad then
      methods.copy_(self._scale, methods.to(methods.reshape(new_scale, {}), self._dev))
    else
      fail(string.format("GradScaler: update: new_scale must be a number or a one-element tensor that does not " ..
        "require grad, got %s", is_tensor(new_scale) and "a tensor of shape [" ..
        table.concat(methods.shape(new_scale), ",") .. "]" .. (new_scale.requires_grad and " that requires grad" or "")
        or fmt(new_scale)))
    end
  else
    local found = {}
    for _, st in pairs(self._per_opt) do
      local f = total(st.found_inf, self._dev)
      if f ~= nil then found[#found + 1] = f end
    end
    if #found == 0 then
      fail("GradScaler: update: no inf checks were recorded before update(); call step(opt) or unscale_(opt) first")
    end
    self:_update_scale(total(found, self._dev))
  end
  self:_scale_changed()
  self._per_opt = setmetatable({}, { __mode = "k" })
end

-- -- settings and state -------------------------------------------------------------------

--- The current scale as a number (reads it to the host): init_scale before the
-- first scale(), 1 when the scaler is disabled.
-- @return a number
-- @usage print(scaler:get_scale())
function GradScaler:get_scale()
  if not self._enabled then return 1.0 end
  if self._scale == nil then return self._init_scale end
  return methods.item(self._scale)
end

function GradScaler:_get_growth_tracker()
  if self._growth_tracker == nil then return self._init_growth_tracker end
  return methods.item(self._growth_tracker)
end

--- The factor the scale grows by after growth_interval good steps.
-- @return a number
-- @usage local f = scaler:get_growth_factor()
function GradScaler:get_growth_factor() return self._growth_factor end

--- Sets the growth factor; the next update() uses it.
-- @param v a finite number > 1
-- @usage scaler:set_growth_factor(4)
function GradScaler:set_growth_factor(v)
  self._growth_factor = check_option("set_growth_factor: ", "growth_factor", v)
end

--- The factor the scale shrinks by after a step with an inf or NaN.
-- @return a number
-- @usage local f = scaler:get_backoff_factor()
function GradScaler:get_backoff_factor() return self._backoff_factor end

--- Sets the backoff factor; the next update() uses it.
-- @param v a number in (0, 1)
-- @usage scaler:set_backoff_factor(0.25)
function GradScaler:set_backoff_factor(v)
  self._backoff_factor = check_option("set_backoff_factor: ", "backoff_factor", v)
end

--- How many good steps in a row make the scale grow.
-- @return an integer
-- @usage local n = scaler:get_growth_interval()
function GradScaler:get_growth_interval() return self._growth_interval end

--- Sets the growth interval; the next update() uses it.
-- @param v a positive integer
-- @usage scaler:set_growth_interval(100)
function GradScaler:set_growth_interval(v)
  self._growth_interval = check_option("set_growth_interval: ", "growth_interval", v)
end

--- Whether the scaler scales (when not, every method passes through).
-- @return a boolean
-- @usage if scaler:is_enabled() then ... end
function GradScaler:is_enabled() return self._enabled end

--- PyTorch's state dict: { scale, growth_factor, backoff_factor,
-- growth_interval, _growth_tracker }, all numbers (the scale and the tracker
-- are read to the host); an empty table when the scaler is disabled.
-- @return the state dict
-- @usage local sd = scaler:state_dict(); other:load_state_dict(sd)
function GradScaler:state_dict()
  if not self._enabled then return {} end
  return { scale = self:get_scale(), growth_factor = self._growth_factor, backoff_factor = self._backoff_factor,
           growth_interval = self._growth_interval, _growth_tracker = self:_get_growth_tracker() }
end

--- Loads a state dict made by state_dict(); everything is checked before
-- anything changes. A disabled scaler ignores it, as PyTorch's does.
-- @param sd the state dict
-- @usage scaler:load_state_dict(checkpoint.scaler)
function GradScaler:load_state_dict(sd)
  if not self._enabled then return end
  if type(sd) ~= "table" then fail("GradScaler: load_state_dict: expects a table, got " .. type(sd)) end
  if next(sd) == nil then
    fail("GradScaler: load_state_dict: the state dict is empty, possibly because it was saved from a disabled " ..
      "GradScaler")
  end
  for _, key in ipairs { "scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker" } do
    local v = sd[key]
    if v == nil then fail(string.format("GradScaler: load_state_dict: the state dict lacks '%s'", key)) end
  end
  check_option("load_state_dict: ", "scale", sd.scale)
  check_option("load_state_dict: ", "growth_factor", sd.growth_factor)
  check_option("load_state_dict: ", "backoff_factor", sd.backoff_factor)
  check_option("load_state_dict: ", "growth_interval", sd.growth_interval)
  check_option("load_state_dict: ", "_growth_tracker", sd._growth_tracker)
  self._init_scale, self._init_growth_tracker = sd.scale, sd._growth_tracker
  self._growth_factor, self._backoff_factor, self._growth_interval = sd.growth_factor, sd.backoff_factor,
    sd.growth_interval
  if self._scale ~= nil then
    methods.fill_(self._scale, sd.scale)
    methods.fill_(self._growth_tracker, sd._growth_tracker)
    self:_scale_changed()
  end
end

return { GradScaler = GradScaler }
