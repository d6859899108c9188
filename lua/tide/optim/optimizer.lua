--- tide.optim.Optimizer: what every optimizer shares. It holds the parameter
-- groups, the per-parameter state, and the 0-d float64 tensors that mirror the
-- groups' numeric hyperparameters (see tide.optim's header for why); it runs
-- step() under no_grad, zero_grad(), state_dict() / load_state_dict() and
-- add_param_group(). The update rules themselves are in sgd.lua, adam.lua and
-- rmsprop.lua, each a class made by Optimizer.class.
local B = require "bindings.ffi"
local T = require "tide.tensor"
local autograd = require "tide.autograd"
local ffi = B.ffi
local fail, is_tensor, methods = B.fail, T.is_tensor, T.methods

-- tide (init.lua) requires this module while it loads, so it is looked up at call time.
local tide_module
local function tide()
  tide_module = tide_module or require "tide"
  return tide_module
end

local Optimizer = {}
Optimizer.__index = Optimizer

-- -- helpers ----------------------------------------------------------------------------

local function fmt(v)
  if type(v) == "string" then return "'" .. v .. "'" end
  if is_tensor(v) then return "a tensor" end
  return tostring(v)
end
Optimizer.fmt = fmt

-- The address of a tensor's C object: two Lua references to one tensor share it.
local function address(t) return tonumber(ffi.cast("uintptr_t", ffi.cast("void *", t))) end

local function shape_str(t) return "[" .. table.concat(methods.shape(t), ",") .. "]" end

-- A copy of a group value (numbers, booleans, strings, tables of them).
local function copy_value(v)
  if type(v) ~= "table" then return v end
  local r = {}
  for k, x in pairs(v) do r[k] = copy_value(x) end
  return r
end

-- Option checks for the classes' check(group, bad): each calls bad(msg) on an error.
local checks = {}
Optimizer.checks = checks
function checks.number(group, key, bad)
  local v = group[key]
  if type(v) ~= "number" then bad(string.format("%s must be a number, got %s", key, fmt(v))) end
  return v
end
function checks.boolean(group, key, bad)
  local v = group[key]
  if type(v) ~= "boolean" then bad(string.format("%s must be a boolean, got %s", key, fmt(v))) end
  return v
end
function checks.at_least_zero(group, key, bad)
  local v = checks.number(group, key, bad)
  if not (v >= 0) then bad(string.format("%s must be >= 0, got %s", key, fmt(v))) end
  return v
end
-- betas: a table of two numbers in [0, 1) (the Adam family's)
function checks.betas(group, bad)
  local betas = group.betas
  if type(betas) ~= "table" or type(betas[1]) ~= "number" or type(betas[2]) ~= "number" or #betas ~= 2 then
    bad(string.format("betas must be a table of two numbers, got %s", type(betas) == "table" and
      string.format("a table of %d values", #betas) or fmt(betas)))
  end
  for i = 1, 2 do
    local b = betas[i]
    if not (b >= 0 and b < 1) then bad(string.format("beta%d must be in [0, 1), got %s", i, fmt(b))) end
  end
end

--- A 0-d float64 tensor holding v, for hyperparameters and step counts.
-- @param v the value
-- @param dev a device name ("cpu", "cpu:1", ...)
-- @return the tensor
-- @usage local step = Optimizer.scalar_tensor(0, p:device())
function Optimizer.scalar_tensor(v, dev)
  return tide().full({}, v, { dtype = "float64", device = dev })
end

--- A zero tensor of p's shape, dtype and device (tide.zeros_like keeps no device).
-- @param p a tensor
-- @return the new tensor
-- @usage state.exp_avg = Optimizer.zeros_like(p)
function Optimizer.zeros_like(p)
  return tide().zeros(methods.shape(p), { dtype = methods.dtype(p), device = methods.device(p) })
end

-- Runs fn(...) with gradient recording off, restoring the mode after an error.
local function without_grad(fn, ...)
  local prev = autograd.set_grad_enabled(false)
  local ok, err = pcall(fn, ...)
  autograd.set_grad_enabled(prev)
  if not ok then error(err, 0) end
end

-- -- classes ------------------------------------------------------------------------------

--- Makes an optimizer class. spec fields:
--   defaults: option -> default value (nil-free; the keys are the valid options);
--   hypers: list of { key, getter(group) } for the numbers mirrored into 0-d tensors;
--   check(group, bad): validates a group's options, calling bad(msg) on the first error;
--   state_keys: state name -> "step" (0-d float64) or "buffer" (the parameter's shape);
--   required_state(group): the state names a loaded state must have;
--   init_state(p, group): a parameter's fresh state;
--   derive(hy, group): per-step 0-d tensors shared by a group's parameters on one device;
--   update(p, g, state, group, hy, d): the in-place update of one parameter.
-- A class whose step is not a per-parameter update (LBFGS) overrides step
-- instead, and state_dict / load_state_dict where its state differs.
-- @param name the class name, used in error messages ("SGD")
-- @param spec the table above; it becomes the class
-- @return the class: call it as Class(params, options)
-- @usage local Mine = Optimizer.class("Mine", { defaults = { lr = 0.1 }, hypers = { ... }, ... })
function Optimizer.class(name, spec)
  local cls = spec
  cls.name = name
  cls.__index = cls
  cls.new = function(params, opts) return Optimizer.init(setmetatable({}, cls), params, opts) end
  cls.__tostring = Optimizer.__tostring
  return setmetatable(cls, { __index = Optimizer, __call = function(_, params, opts) return cls.new(params, opts) end })
end

--- Whether x is an optimizer (an instance of a class made by Optimizer.class).
-- @param x any value
-- @return a boolean
-- @usage assert(tide.optim.Optimizer.is_optimizer(opt))
function Optimizer.is_optimizer(x)
  if type(x) ~= "table" then return false end
  local mt = getmetatable(x)
  return type(mt) == "table" and type(mt.step) == "function" and type(x.param_groups) == "table"
end

-- Validates the options of a group; where is "" or "param group 2: ".
function Optimizer:_check_group(group, where)
  self.check(group, function(msg) fail(self.name .. ": " .. where .. msg) end)
end

-- Checks one parameter of a group and that it appears nowhere else; seen maps
-- addresses to "parameter i of group j".
function Optimizer:_check_param(p, i, gi, seen, api)
  local what = string.format("%s: %sparameter %d of group %d", self.name, api, i, gi)
  if not is_tensor(p) then fail(string.format("%s must be a tensor, got %s", what, type(p))) end
  local fn = p.grad_fn
  if fn ~= nil then
    fail(string.format("%s is not a leaf tensor (it was computed by '%s'); optimize the leaf it came from", what, fn))
  end
  if not p.requires_grad then
    fail(string.format("%s does not require grad; call p:requires_grad_() on it first", what))
  end
  local key = address(p)
  if seen[key] then fail(string.format("%s is the same tensor as %s", what, seen[key])) end
  seen[key] = string.format("parameter %d of group %d", i, gi)
end

-- Addresses of the parameters already in the optimizer.
function Optimizer:_seen()
  local seen = {}
  for gi, g in ipairs(self.param_groups) do
    for i, p in ipairs(g.params) do seen[address(p)] = string.format("parameter %d of group %d", i, gi) end
  end
  return seen
end

-- Normalises a group table (params a tensor or a list), checks it and adds it.
function Optimizer:_add_group(group, gi, seen, api)
  if type(group) ~= "table" or is_tensor(group) then
    fail(string.format("%s: %sparam group %d must be a table with 'params', got %s", self.name, api, gi,
      is_tensor(group) and "a tensor" or type(group)))
  end
  local params = group.params
  if is_tensor(params) then params = { params } end
  if type(params) ~= "table" then
    fail(string.format("%s: %sparam group %d has no 'params' (a tensor or a table of tensors)", self.name, api, gi))
  end
  if #params == 0 then fail(string.format("%s: %sparam group %d has an empty parameter list", self.name, api, gi)) end
  for i = 1, #params do self:_check_param(params[i], i, gi, seen, api) end
  local g = { params = {} }
  for k, v in pairs(group) do
    if k ~= "params" then g[k] = copy_value(v) end
  end
  for i = 1, #params do g.params[i] = params[i] end
  for k, v in pairs(self.defaults) do
    if g[k] == nil then g[k] = copy_value(v) end
  end
  self:_check_group(g, group == self._implicit and "" or string.format("%sparam group %d: ", api, gi))
  self.param_groups[gi] = g
  self._hy[g] = { values = {}, dev = {} }
  return g
end

--- Sets up an optimizer: called by Class(params, options).
-- @param self the new instance
-- @param params a tensor, a table of tensors, or a table of param groups
--   ({ params = {...}, lr = ... }), PyTorch's forms
-- @param opts options table (the class's defaults for what it leaves out)
-- @return self
function Optimizer.init(self, params, opts)
  local name = self.name
  if opts ~= nil and type(opts) ~= "table" then
    fail(string.format("%s: options must be a table, got %s", name, type(opts)))
  end
  opts = opts or {}
  local defaults = {}
  for k, v in pairs(self.defaults) do defaults[k] = copy_value(v) end
  for k, v in pairs(opts) do
    if self.defaults[k] == nil then fail(string.format("%s: unknown option %s", name, fmt(k))) end
    defaults[k] = copy_value(v)
  end
  self.check(defaults, function(msg) fail(name .. ": " .. msg) end)
  self.defaults = defaults
  self.param_groups, self.state, self._hy = {}, {}, setmetatable({}, { __mode = "k" })
  if is_tensor(params) then params = { params } end
  if type(params) ~= "table" then
    fail(string.format("%s: params must be a tensor, a table of tensors or a table of param groups, got %s",
      name, type(params)))
  end
  if #params == 0 then fail(name .. ": got an empty parameter list") end
  local groups = params
  if type(params[1]) ~= "table" or is_tensor(params[1]) then   -- a list of parameters: one group
    self._implicit = { params = params }
    groups = { self._implicit }
  end
  local seen = {}
  for gi, group in ipairs(groups) do self:_add_group(group, gi, seen, "") end
  self._implicit = nil
  return self
end

--- Adds a param group (a table with `params` and any options; the defaults fill the rest).
-- @param group { params = tensor or {tensors}, lr = ..., ... }
-- @return the group as stored in opt.param_groups
-- @usage opt:add_param_group({ params = head_params, lr = 0.01 })
function Optimizer:add_param_group(group)
  return self:_add_group(group, #self.param_groups + 1, self:_seen(), "add_param_group: ")
end

-- -- hyperparameter tensors ------------------------------------------------------------------

--- Writes the numeric hyperparameters of every group (lr, momentum, betas, ...)
-- into the group's 0-d float64 tensors, with one fill op per value that changed
-- since the last call. step() calls it first, and so does a scheduler's step().
-- @usage opt.param_groups[1].lr = 0.01; opt:sync_hyperparameters()
function Optimizer:sync_hyperparameters()
  for gi, group in ipairs(self.param_groups) do
    local rec = self._hy[group]
    if rec == nil then   -- a group table put into param_groups by hand
      rec = { values = {}, dev = {} }
      self._hy[group] = rec
    end
    for _, h in ipairs(self.hypers) do
      local key = h[1]
      local v = h[2](group)
      if type(v) ~= "number" then
        fail(string.format("%s: param group %d: %s must be a number, got %s", self.name, gi, key, type(v)))
      end
      if v ~= rec.values[key] then
        for _, ts in pairs(rec.dev) do methods.fill_(ts[key], v) end
        rec.values[key] = v
      end
    end
  end
end

--- The 0-d float64 tensors the update ops of group gi read, on device dev
-- (default: that of the group's first parameter, the tensors its updates
-- read): a table key -> tensor, keys as in the class's hypers
-- ("lr", "momentum", "beta1", ...). Made on first use; kept in sync by
-- sync_hyperparameters(). A compiled step reads them, so writing them (or
-- setting the group's fields and calling sync_hyperparameters) changes what
-- a replay does.
-- @param gi the group's index (1-based)
-- @param dev a device name; by default the group's first parameter's, else "cpu"
-- @return table of 0-d tensors
-- @usage local lr_t = opt:hyperparameter_tensors(1).lr
function Optimizer:hyperparameter_tensors(gi, dev)
  local group = self.param_groups[gi]
  if group == nil then
    fail(string.format("%s: hyperparameter_tensors: no param group %s (there are %d)", self.name, fmt(gi),
      #self.param_groups))
  end
  dev = dev or (group.params[1] and group.params[1]:device()) or "cpu"
  local rec = self._hy[group]
  if rec == nil or next(rec.values) == nil then self:sync_hyperparameters(); rec = self._hy[group] end
  local ts = rec.dev[dev]
  if ts == nil then
    ts = {}
    for _, h in ipairs(self.hypers) do ts[h[1]] = Optimizer.scalar_tensor(rec.values[h[1]], dev) end
    rec.dev[dev] = ts
  end
  return ts
end

-- -- step and zero_grad -------------------------------------------------------------------

-- One step over every group; runs with gradient recording off.
function Optimizer:_step_all()
  local state = self.state
  for gi, group in ipairs(self.param_groups) do
    local derived = {}
    for _, p in ipairs(group.params) do
      local g = p.grad
      if g ~= nil then
        local dev = methods.device(p)
        local hy = self:hyperparameter_tensors(gi, dev)
        local d = derived[dev]
        if d == nil then
          d = self.derive(hy, group)
          derived[dev] = d
        end
        local st = state[p]
        if st == nil then
          st = self.init_state(p, group)
          state[p] = st
        end
        self.update(p, g, st, group, hy, d)
      end
    end
  end
end

--- Updates every parameter that has a gradient (those whose grad is nil are
-- skipped, and get no state). The update runs as in-place engine ops, with
-- gradient recording off.
-- @param closure optional function that recomputes the loss (called with grad on)
-- @return what closure returned, if given
-- @usage loss:backward(); opt:step(); opt:zero_grad()
function Optimizer:step(closure)
  local loss
  if closure ~= nil then
    if type(closure) ~= "function" then
      fail(string.format("%s: step: closure must be a function, got %s", self.name, type(closure)))
    end
    loss = autograd.enable_grad(closure)
  end
  self:sync_hyperparameters()
  without_grad(self._step_all, self)
  return loss
end

--- Clears the gradients of every parameter: sets them to nil (PyTorch's
-- set_to_none default), or, with set_to_none = false, zeroes them in place.
-- @param set_to_none false to zero in place (default true)
-- @usage opt:zero_grad()
function Optimizer:zero_grad(set_to_none)
  if set_to_none ~= nil and type(set_to_none) ~= "boolean" then
    fail(string.format("%s: zero_grad: set_to_none must be a boolean, got %s", self.name, type(set_to_none)))
  end
  for _, group in ipairs(self.param_groups) do
    for _, p in ipairs(group.params) do
      if set_to_none == false then
        local g = p.grad
        if g ~= nil then without_grad(methods.zero_, g) end
      else
        p.grad = nil
      end
    end
  end
end

-- -- state dicts ------------------------------------------------------------------------------

--- A snapshot of the optimizer: { state = { [i] = { name = tensor, ... } },
-- param_groups = { { lr = ..., ..., params = { i, ... } } } } where i numbers
-- the parameters from 1 across the groups in order. The state tensors are
-- copies (a later step does not change the snapshot); the hyperparameters are
-- plain Lua values.
-- @return the state dict, a nested table of numbers, booleans and tensors
-- @usage local sd = opt:state_dict(); opt2:load_state_dict(sd)
function Optimizer:state_dict()
  local state, groups, index = {}, {}, 0
  for gi, group in ipairs(self.param_groups) do
    local pg = {}
    for k, v in pairs(group) do
      if k ~= "params" then pg[k] = copy_value(v) end
    end
    pg.params = {}
    for _, p in ipairs(group.params) do
      index = index + 1
      pg.params[#pg.params + 1] = index
      local st = self.state[p]
      if st ~= nil then
        local copy = {}
        for k, v in pairs(st) do copy[k] = is_tensor(v) and methods.clone(v) or copy_value(v) end
        state[index] = copy
      end
    end
    groups[gi] = pg
  end
  return { state = state, param_groups = groups }
end

--- Loads a state dict made by state_dict() of an optimizer of the same class
-- over parameters of the same shapes, in the same group structure. Everything
-- is checked before anything changes; the state tensors are copied, converted
-- to each parameter's dtype and device. The groups keep their parameters and
-- take the saved hyperparameters.
-- @param sd the state dict
-- @usage opt:load_state_dict(saved)
function Optimizer:load_state_dict(sd)
  local name = self.name
  local function bad(msg, ...) fail(string.format(name .. ": load_state_dict: " .. msg, ...)) end
  if type(sd) ~= "table" or type(sd.state) ~= "table" or type(sd.param_groups) ~= "table" then
    bad("expects a table with the tables 'state' and 'param_groups', got %s",
      type(sd) == "table" and "a table without them" or type(sd))
  end
  local groups = self.param_groups
  if #sd.param_groups ~= #groups then
    bad("the state dict has %d param groups, the optimizer %d", #sd.param_groups, #groups)
  end
  local params, owner = {}, {}
  for gi, group in ipairs(groups) do
    local saved = sd.param_groups[gi]
    if type(saved) ~= "table" or type(saved.params) ~= "table" then
      bad("param group %d must be a table with 'params', got %s", gi, type(saved))
    end
    if #saved.params ~= #group.params then
      bad("param group %d has %d parameters in the state dict, %d in the optimizer", gi, #saved.params, #group.params)
    end
    for i, p in ipairs(group.params) do
      local k = saved.params[i]
      if k ~= #params + 1 then
        bad("param group %d lists parameter %s at position %d, expected %d", gi, fmt(k), i, #params + 1)
      end
      params[k], owner[k] = p, gi
    end
  end
  -- the hyperparameters, checked as the constructor checks them
  local loaded = {}
  for gi, saved in ipairs(sd.param_groups) do
    local g = {}
    for k, v in pairs(saved) do
      if k ~= "params" then g[k] = copy_value(v) end
    end
    local keys = {}
    for k in pairs(self.defaults) do keys[#keys + 1] = k end
    table.sort(keys)
    for _, k in ipairs(keys) do
      if g[k] == nil then bad("param group %d lacks '%s'", gi, k) end
    end
    self:_check_group(g, string.format("load_state_dict: param group %d: ", gi))
    loaded[gi] = g
  end
  -- the state, checked against the parameters
  for k, st in pairs(sd.state) do
    local p = params[k]
    if p == nil then bad("state for parameter %s, but the optimizer has %d parameters", fmt(k), #params) end
    if type(st) ~= "table" then bad("the state of parameter %d must be a table, got %s", k, type(st)) end
    for key, v in pairs(st) do
      local kind = self.state_keys[key]
      if kind == nil then bad("unknown state %s for parameter %d", fmt(key), k) end
      if kind == "step" then
        if not (type(v) == "number" or (is_tensor(v) and v:numel() == 1)) then
          bad("%s of parameter %d must be a number or a one-element tensor, got %s", key, k,
            is_tensor(v) and "shape " .. shape_str(v) or type(v))
        end
      elseif not is_tensor(v) then
        bad("%s of parameter %d must be a tensor, got %s", key, k, type(v))
      elseif shape_str(v) ~= shape_str(p) then
        bad("%s of parameter %d has shape %s, the parameter %s", key, k, shape_str(v), shape_str(p))
      end
    end
    for _, key in ipairs(self.required_state(loaded[owner[k]])) do
      if st[key] == nil then bad("the state of parameter %d lacks %s", k, key) end
    end
  end
  -- all checked: apply
  for gi, group in ipairs(groups) do
    for key in pairs(group) do
      if key ~= "params" then group[key] = nil end
    end
    for key, v in pairs(loaded[gi]) do group[key] = v end
    local rec = self._hy[group]   -- keep the tensors (a compiled step reads them); refill them all
    if rec then rec.values = {} end
  end
  local state = {}
  for k, st in pairs(sd.state) do
    local p = params[k]
    local dev = methods.device(p)
    local copy = {}
    for key, v in pairs(st) do
      if self.state_keys[key] == "step" then
        local n = type(v) == "number" and v or v:item()
        copy[key] = Optimizer.scalar_tensor(n, dev)
      else
        local c = methods.to(v, methods.dtype(p), dev)
        copy[key] = c == v and methods.clone(v) or c
      end
    end
    state[p] = copy
  end
  self.state = state
  self:sync_hyperparameters()
end

-- -- printing ----------------------------------------------------------------------------------

function Optimizer:__tostring()
  local lines = { self.name .. " (" }
  for gi, g in ipairs(self.param_groups) do
    local keys = {}
    for k in pairs(g) do
      if k ~= "params" then keys[#keys + 1] = k end
    end
    table.sort(keys)
    lines[#lines + 1] = string.format("  param group %d: %d parameters", gi, #g.params)
    for _, k in ipairs(keys) do
      local v = g[k]
      if type(v) == "table" then
        local parts = {}
        for i = 1, #v do parts[i] = tostring(v[i]) end
        v = "{" .. table.concat(parts, ", ") .. "}"
      end
      lines[#lines + 1] = string.format("    %s: %s", k, tostring(v))
    end
  end
  lines[#lines + 1] = ")"
  return table.concat(lines, "\n")
end

return Optimizer
