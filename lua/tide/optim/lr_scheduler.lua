--- tide.optim.lr_scheduler: learning-rate schedules, as torch.optim.lr_scheduler
-- has them: StepLR, CosineAnnealingLR and OneCycleLR (which also cycles the
-- momentum or beta1). Each computes its closed form from the step count and
-- writes the groups' `lr` (and `momentum` / `betas`), then has the optimizer
-- copy them into its hyperparameter tensors, so a compiled step sees them.
-- Chaining several schedulers on one optimizer is left out: the last one wins.
local Optimizer = require "tide.optim.optimizer"
local fail = require("bindings.ffi").fail

local fmt = Optimizer.fmt
local M = {}

-- -- the base ------------------------------------------------------------------------------

--- LRScheduler: the base of the schedulers. A class made by LRScheduler.class
-- gives options (the set of option names it takes), fields (the names of its
-- settings, saved by state_dict), setup(self, optimizer, opts) (checks and
-- keeps its options) and get_lr(self, step) (the lr of each group at a step
-- count, counted from 0; self.base_lrs holds each group's initial_lr).
local LRScheduler = {}
LRScheduler.__index = LRScheduler
M.LRScheduler = LRScheduler

--- Makes a scheduler class.
-- @param name the class name ("StepLR")
-- @param cls a table with options, fields, setup and get_lr (see LRScheduler)
-- @return the class: call it as Class(optimizer, options)
-- @usage local Constant = LRScheduler.class("Constant", { options = {}, fields = {}, setup = function() end,
--   get_lr = function(self) return self.base_lrs end })
function LRScheduler.class(name, cls)
  cls.name = name
  cls.__index = cls
  cls.__tostring = LRScheduler.__tostring
  cls.new = function(optimizer, opts)
    local self = setmetatable({}, cls)
    if not Optimizer.is_optimizer(optimizer) then
      fail(string.format("%s: argument 1 must be an optimizer, got %s", name, type(optimizer)))
    end
    if opts ~= nil and type(opts) ~= "table" then
      fail(string.format("%s: options must be a table, got %s", name, type(opts)))
    end
    opts = opts or {}
    for k in pairs(opts) do
      if not cls.options[k] then fail(string.format("%s: unknown option %s", name, fmt(k))) end
    end
    self.optimizer = optimizer
    cls.setup(self, optimizer, opts)
    self.base_lrs = {}
    for i, group in ipairs(optimizer.param_groups) do
      if group.initial_lr == nil then group.initial_lr = group.lr end
      self.base_lrs[i] = group.initial_lr
    end
    self.last_epoch, self._step_count = -1, 0
    self:step()
    return self
  end
  return setmetatable(cls, { __index = LRScheduler, __call = function(_, opt, opts) return cls.new(opt, opts) end })
end

--- Advances the schedule one step: sets each group's lr (and momentum, for
-- OneCycleLR) to the value for the new step count, and writes them into the
-- optimizer's hyperparameter tensors. Call it after opt:step().
-- @usage for epoch = 1, n do train(); sched:step() end
function LRScheduler:step()
  local lrs = self:get_lr(self.last_epoch + 1)
  self._step_count = self._step_count + 1
  self.last_epoch = self.last_epoch + 1
  local groups = self.optimizer.param_groups
  for i, group in ipairs(groups) do group.lr = lrs[i] end
  local last = {}
  for i, group in ipairs(groups) do last[i] = group.lr end
  self._last_lr = last
  self.optimizer:sync_hyperparameters()
end

--- The learning rates set by the last step, one per param group.
-- @return a table of numbers
-- @usage print(sched:get_last_lr()[1])
function LRScheduler:get_last_lr()
  local r = {}
  for i, v in ipairs(self._last_lr) do r[i] = v end
  return r
end

-- A copy of a value made of numbers, strings, booleans and tables of them.
local function copy(v)
  if type(v) ~= "table" then return v end
  local r = {}
  for k, x in pairs(v) do r[k] = copy(x) end
  return r
end

--- The scheduler's state: last_epoch, _step_count, base_lrs, _last_lr and its
-- settings, as plain Lua values (the optimizer is not included; save its own).
-- @return a table
-- @usage local sd = sched:state_dict()
function LRScheduler:state_dict()
  local sd = { last_epoch = self.last_epoch, _step_count = self._step_count, base_lrs = copy(self.base_lrs),
               _last_lr = copy(self._last_lr) }
  for _, k in ipairs(self.fields) do sd[k] = copy(self[k]) end
  return sd
end

--- Restores a state saved by state_dict() of a scheduler of the same class over
-- as many param groups. It does not change the optimizer's lrs: load the
-- optimizer's own state dict for those.
-- @param sd the state dict
-- @usage sched:load_state_dict(saved)
function LRScheduler:load_state_dict(sd)
  local name = self.name
  local function bad(msg, ...) fail(string.format(name .. ": load_state_dict: " .. msg, ...)) end
  if type(sd) ~= "table" then bad("expects a table, got %s", type(sd)) end
  for _, k in ipairs { "last_epoch", "_step_count" } do
    if type(sd[k]) ~= "number" then bad("'%s' must be a number, got %s", k, fmt(sd[k])) end
  end
  local n = #self.optimizer.param_groups
  for _, k in ipairs { "base_lrs", "_last_lr" } do
    local v = sd[k]
    if type(v) ~= "table" or #v ~= n then
      bad("'%s' must be a table of %d numbers (one per param group), got %s", k, n,
        type(v) == "table" and string.format("%d values", #v) or fmt(v))
    end
  end
  for _, k in ipairs(self.fields) do
    if sd[k] == nil then bad("lacks '%s' (is it the state of a %s?)", k, name) end
    if type(sd[k]) ~= type(self[k]) then
      bad("'%s' must be a %s, got %s", k, type(self[k]), type(sd[k]))
    end
  end
  self.last_epoch, self._step_count = sd.last_epoch, sd._step_count
  self.base_lrs, self._last_lr = copy(sd.base_lrs), copy(sd._last_lr)
  for _, k in ipairs(self.fields) do self[k] = copy(sd[k]) end
end

function LRScheduler:__tostring()
  return string.format("%s (last_epoch %d, lr %s)", self.name, self.last_epoch,
    table.concat(self:get_last_lr(), ", "))
end

-- -- argument checks ------------------------------------------------------------------------

local function positive_integer(name, key, v)
  if type(v) ~= "number" or v <= 0 or v ~= math.floor(v) then
    fail(string.format("%s: %s must be a positive integer, got %s", name, key, fmt(v)))
  end
  return v
end

local function number(name, key, v)
  if type(v) ~= "number" then fail(string.format("%s: %s must be a number, got %s", name, key, fmt(v))) end
  return v
end

-- -- StepLR -----------------------------------------------------------------------------------

--- StepLR(optimizer, {step_size, gamma = 0.1}): lr = base_lr * gamma^floor(step / step_size).
-- @usage local sched = tide.optim.StepLR(opt, { step_size = 30, gamma = 0.1 })
M.StepLR = LRScheduler.class("StepLR", {
  options = { step_size = true, gamma = true },
  fields = { "step_size", "gamma" },
  setup = function(self, _, opts)
    self.step_size = positive_integer("StepLR", "step_size", opts.step_size)
    self.gamma = number("StepLR", "gamma", opts.gamma == nil and 0.1 or opts.gamma)
  end,
  get_lr = function(self, epoch)
    local r = {}
    for i, base in ipairs(self.base_lrs) do r[i] = base * self.gamma ^ math.floor(epoch / self.step_size) end
    return r
  end,
})

-- -- CosineAnnealingLR ----------------------------------------------------------------------

--- CosineAnnealingLR(optimizer, {T_max, eta_min = 0}):
-- lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * step / T_max)) / 2.
-- @usage local sched = tide.optim.CosineAnnealingLR(opt, { T_max = 100, eta_min = 1e-5 })
M.CosineAnnealingLR = LRScheduler.class("CosineAnnealingLR", {
  options = { T_max = true, eta_min = true },
  fields = { "T_max", "eta_min" },
  setup = function(self, _, opts)
    self.T_max = positive_integer("CosineAnnealingLR", "T_max", opts.T_max)
    self.eta_min = number("CosineAnnealingLR", "eta_min", opts.eta_min or 0)
  end,
  get_lr = function(self, epoch)
    local r, eta_min = {}, self.eta_min
    for i, base in ipairs(self.base_lrs) do
      r[i] = eta_min + (base - eta_min) * (1 + math.cos(math.pi * epoch / self.T_max)) / 2
    end
    return r
  end,
})

-- -- OneCycleLR ----------------------------------------------------------------------------

local anneal = {
  cos = function(start, stop, pct) return stop + (start - stop) / 2 * (math.cos(math.pi * pct) + 1) end,
  linear = function(start, stop, pct) return (stop - start) * pct + start end,
}

-- A number, or a table of one number per group: the value for each group.
local function per_group(name, key, v, groups)
  local n = #groups
  local r = {}
  if type(v) == "number" then
    for i = 1, n do r[i] = v end
    return r
  end
  if type(v) == "table" and #v == n then
    for i = 1, n do r[i] = number(name, key .. "[" .. i .. "]", v[i]) end
    return r
  end
  fail(string.format("%s: %s must be a number or a table of %d numbers (one per param group), got %s", name, key, n,
    type(v) == "table" and string.format("a table of %d", #v) or fmt(v)))
end

--- OneCycleLR(optimizer, {max_lr, total_steps | epochs and steps_per_epoch,
-- pct_start = 0.3, anneal_strategy = "cos" | "linear", cycle_momentum = true,
-- base_momentum = 0.85, max_momentum = 0.95, div_factor = 25,
-- final_div_factor = 1e4, three_phase = false}): the 1cycle policy. The lr
-- goes from max_lr / div_factor up to max_lr over pct_start of the steps, then
-- down to initial_lr / final_div_factor (three_phase: back to initial_lr over
-- as many steps, then down to the minimum). The momentum (or beta1) moves the
-- other way between max_momentum and base_momentum. max_lr and the momenta may
-- be tables, one value per param group. Stepping past total_steps is an error.
-- @usage local sched = tide.optim.OneCycleLR(opt, { max_lr = 0.1, total_steps = 1000 })
M.OneCycleLR = LRScheduler.class("OneCycleLR", {
  options = { max_lr = true, total_steps = true, epochs = true, steps_per_epoch = true, pct_start = true,
              anneal_strategy = true, cycle_momentum = true, base_momentum = true, max_momentum = true,
              div_factor = true, final_div_factor = true, three_phase = true },
  fields = { "total_steps", "phases", "anneal_strategy", "cycle_momentum", "use_beta1" },
  setup = function(self, optimizer, opts)
    local N = "OneCycleLR"
    local total
    if opts.total_steps ~= nil then
      total = positive_integer(N, "total_steps", opts.total_steps)
    elseif opts.epochs ~= nil and opts.steps_per_epoch ~= nil then
      total = positive_integer(N, "epochs", opts.epochs) * positive_integer(N, "steps_per_epoch", opts.steps_per_epoch)
    else
      fail(N .. ": give total_steps, or epochs and steps_per_epoch")
    end
    self.total_steps = total
    local pct = opts.pct_start == nil and 0.3 or opts.pct_start
    if type(pct) ~= "number" or not (pct >= 0 and pct <= 1) then
      fail(string.format("%s: pct_start must be a number in [0, 1], got %s", N, fmt(pct)))
    end
    if opts.three_phase ~= nil and type(opts.three_phase) ~= "boolean" then
      fail(string.format("%s: three_phase must be a boolean, got %s", N, fmt(opts.three_phase)))
    end
    if opts.three_phase then
      self.phases = {
        { end_step = pct * total - 1, start_lr = "initial_lr", end_lr = "max_lr",
          start_momentum = "max_momentum", end_momentum = "base_momentum" },
        { end_step = 2 * pct * total - 2, start_lr = "max_lr", end_lr = "initial_lr",
          start_momentum = "base_momentum", end_momentum = "max_momentum" },
        { end_step = total - 1, start_lr = "initial_lr", end_lr = "min_lr",
          start_momentum = "max_momentum", end_momentum = "max_momentum" },
      }
    else
      self.phases = {
        { end_step = pct * total - 1, start_lr = "initial_lr", end_lr = "max_lr",
          start_momentum = "max_momentum", end_momentum = "base_momentum" },
        { end_step = total - 1, start_lr = "max_lr", end_lr = "min_lr",
          start_momentum = "base_momentum", end_momentum = "max_momentum" },
      }
    end
    local strategy = opts.anneal_strategy or "cos"
    if not anneal[strategy] then
      fail(string.format("%s: anneal_strategy must be 'cos' or 'linear', got %s", N, fmt(strategy)))
    end
    self.anneal_strategy = strategy
    local div = number(N, "div_factor", opts.div_factor or 25)
    local final_div = number(N, "final_div_factor", opts.final_div_factor or 1e4)
    local groups = optimizer.param_groups
    if opts.max_lr == nil then fail(N .. ": max_lr is required") end
    local max_lrs = per_group(N, "max_lr", opts.max_lr, groups)
    for i, group in ipairs(groups) do
      group.initial_lr = max_lrs[i] / div
      group.max_lr = max_lrs[i]
      group.min_lr = group.initial_lr / final_div
    end
    local cycle = opts.cycle_momentum
    if cycle == nil then cycle = true end
    if type(cycle) ~= "boolean" then
      fail(string.format("%s: cycle_momentum must be a boolean, got %s", N, fmt(cycle)))
    end
    self.cycle_momentum, self.use_beta1 = cycle, false
    if cycle then
      local defaults = optimizer.defaults
      if defaults.momentum == nil and defaults.betas == nil then
        fail(string.format("%s: cycle_momentum needs an optimizer with momentum or betas; %s has neither " ..
          "(pass cycle_momentum = false)", N, optimizer.name))
      end
      self.use_beta1 = defaults.betas ~= nil
      local maxm = per_group(N, "max_momentum", opts.max_momentum == nil and 0.95 or opts.max_momentum, groups)
      local basem = per_group(N, "base_momentum", opts.base_momentum == nil and 0.85 or opts.base_momentum, groups)
      for i, group in ipairs(groups) do
        if self.use_beta1 then group.betas = { maxm[i], group.betas[2] } else group.momentum = maxm[i] end
        group.max_momentum, group.base_momentum = maxm[i], basem[i]
      end
    end
  end,
  get_lr = function(self, step)
    if step > self.total_steps then
      fail(string.format("OneCycleLR: tried to step %d times; total_steps is %d", step, self.total_steps))
    end
    local f, phases = anneal[self.anneal_strategy], self.phases
    local lrs, momenta = {}, {}
    for i, group in ipairs(self.optimizer.param_groups) do
      local start = 0
      for k, phase in ipairs(phases) do
        local stop = phase.end_step
        if step <= stop or k == #phases then
          if stop == start then
            fail(string.format("OneCycleLR: phase %d is empty (it ends at step %s where it starts); give more " ..
              "total_steps or another pct_start", k, fmt(stop)))
          end
          local pct = (step - start) / (stop - start)
          lrs[i] = f(group[phase.start_lr], group[phase.end_lr], pct)
          if self.cycle_momentum then
            momenta[i] = f(group[phase.start_momentum], group[phase.end_momentum], pct)
          end
          break
        end
        start = stop
      end
    end
    if self.cycle_momentum then
      for i, group in ipairs(self.optimizer.param_groups) do
        if self.use_beta1 then group.betas = { momenta[i], group.betas[2] } else group.momentum = momenta[i] end
      end
    end
    return lrs
  end,
})

return M
