--- tide.optim.lr_scheduler: learning-rate schedules, as torch.optim.lr_scheduler
-- has them: StepLR, MultiStepLR, ExponentialLR, LambdaLR, MultiplicativeLR,
-- LinearLR, ConstantLR, PolynomialLR, CosineAnnealingLR,
-- CosineAnnealingWarmRestarts, OneCycleLR (which also cycles the momentum or
-- beta1), SequentialLR and ReduceLROnPlateau. Each computes its lr on the host
-- (PyTorch's closed form where it has one, the previous lr times a factor for
-- MultiplicativeLR and ReduceLROnPlateau), writes the groups' `lr` (and
-- `momentum` / `betas`), then has the optimizer copy them into its
-- hyperparameter tensors, so a compiled step sees them. Stepping several
-- closed-form schedulers on one optimizer by hand, the last one wins; a
-- ChainedScheduler (lr_scheduler_extra.lua, with CyclicLR) steps them in their
-- chainable forms, so their factors multiply (SequentialLR runs one after another).
local Optimizer = require "tide.optim.optimizer"
local fail = require("bindings.ffi").fail
local is_tensor = require("tide.tensor").is_tensor

local fmt = Optimizer.fmt
local M = {}

-- -- the base ------------------------------------------------------------------------------

--- LRScheduler: the base of the schedulers. A class made by LRScheduler.class
-- gives options (the set of option names it takes), fields (the names of its
-- settings, saved by state_dict), setup(self, optimizer, opts) (checks and
-- keeps its options) and get_lr(self, step) (the lr of each group at a step
-- count, counted from 0; self.base_lrs holds each group's initial_lr, and the
-- groups' lr still hold the previous step's values). A class may also replace
-- step, _initial_step (the constructor's step 0), state_dict and
-- load_state_dict, as CosineAnnealingWarmRestarts, SequentialLR and
-- ReduceLROnPlateau do.
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
    self:_initial_step()
    return self
  end
  return setmetatable(cls, { __index = LRScheduler, __call = function(_, opt, opts) return cls.new(opt, opts) end })
end

-- Called once the options are set up: records each group's initial_lr (the
-- base_lrs) and takes step 0, as PyTorch's constructor does.
function LRScheduler:_initial_step()
  self.base_lrs = {}
  for i, group in ipairs(self.optimizer.param_groups) do
    if group.initial_lr == nil then group.initial_lr = group.lr end
    self.base_lrs[i] = group.initial_lr
  end
  self.last_epoch, self._step_count = -1, 0
  self:step()
end

-- Sets the groups' lr to lrs at step count epoch and writes them into the
-- optimizer's hyperparameter tensors.
function LRScheduler:_set_lrs(lrs, epoch)
  self._step_count = self._step_count + 1
  self.last_epoch = epoch
  local groups = self.optimizer.param_groups
  for i, group in ipairs(groups) do group.lr = lrs[i] end
  local last = {}
  for i, group in ipairs(groups) do last[i] = group.lr end
  self._last_lr = last
  self.optimizer:sync_hyperparameters()
end

--- Advances the schedule one step: sets each group's lr (and momentum, for
-- OneCycleLR) to the value for the new step count, and writes them into the
-- optimizer's hyperparameter tensors. Call it after opt:step(). Given an
-- epoch, it jumps there instead (PyTorch's deprecated step(epoch); SequentialLR
-- restarts a schedule with step(0)).
-- @param epoch optional step count to go to (a non-negative integer)
-- @usage for epoch = 1, n do train(); sched:step() end
function LRScheduler:step(epoch)
  if epoch == nil then
    epoch = self.last_epoch + 1
  elseif type(epoch) ~= "number" or epoch < 0 or epoch ~= math.floor(epoch) then
    fail(string.format("%s: step: epoch must be a non-negative integer, got %s", self.name, fmt(epoch)))
  end
  self:_set_lrs(self:get_lr(epoch), epoch)
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

local function non_negative_integer(name, key, v)
  if type(v) ~= "number" or v < 0 or v ~= math.floor(v) then
    fail(string.format("%s: %s must be a non-negative integer, got %s", name, key, fmt(v)))
  end
  return v
end

local function at_least_zero(name, key, v)
  if type(v) ~= "number" or not (v >= 0) then
    fail(string.format("%s: %s must be a number >= 0, got %s", name, key, fmt(v)))
  end
  return v
end

-- A number in [lo, hi] (open at hi when hi_open, at lo when lo_open).
local function in_range(name, key, v, lo, hi, lo_open, hi_open)
  if type(v) ~= "number" or not ((lo_open and v > lo or not lo_open and v >= lo) and
      (hi_open and v < hi or not hi_open and v <= hi)) then
    fail(string.format("%s: %s must be a number in %s%s, %s%s, got %s", name, key, lo_open and "(" or "[", lo, hi,
      hi_open and ")" or "]", fmt(v)))
  end
  return v
end

-- A list of increasing integers, each >= lo.
-- Fails unless scheds is a non-empty list (SequentialLR's and ChainedScheduler's argument).
local function need_scheduler_list(name, scheds)
  if type(scheds) ~= "table" or getmetatable(scheds) ~= nil or #scheds == 0 then
    fail(string.format("%s: schedulers must be a non-empty table of schedulers, got %s", name,
      type(scheds) == "table" and getmetatable(scheds) == nil and "an empty table" or fmt(scheds)))
  end
end

-- A copy of the schedulers a schedule of schedules runs, each checked: a
-- scheduler of `optimizer` (named `owner` in the error), not a
-- ReduceLROnPlateau (which cannot be `verb`: its step needs a metric).
local function scheduler_list(name, scheds, optimizer, verb, owner)
  need_scheduler_list(name, scheds)
  local r = {}
  for i, s in ipairs(scheds) do
    if type(s) ~= "table" or getmetatable(s) == nil or type(s.step) ~= "function" or s.optimizer == nil then
      fail(string.format("%s: schedulers[%d] must be a scheduler, got %s", name, i, fmt(s)))
    end
    if s.name == "ReduceLROnPlateau" then
      fail(string.format("%s: schedulers[%d] is a ReduceLROnPlateau, whose step needs a metric; it cannot be %s",
        name, i, verb))
    end
    if s.optimizer ~= optimizer then
      fail(string.format("%s: schedulers[%d] belongs to another optimizer than %s", name, i, owner))
    end
    r[i] = s
  end
  return r
end

-- A schedule of schedules starts over: each group's lr back at its
-- initial_lr, which is also each base_lr.
local function restart_lrs(self)
  self.base_lrs = {}
  for i, group in ipairs(self.optimizer.param_groups) do
    group.lr = group.initial_lr
    self.base_lrs[i] = group.initial_lr
  end
end

local function increasing(name, key, v, lo)
  if type(v) ~= "table" then
    fail(string.format("%s: %s must be a table of increasing integers, got %s", name, key, fmt(v)))
  end
  local r = {}
  for i = 1, #v do
    local m = v[i]
    if type(m) ~= "number" or m ~= math.floor(m) or m < lo then
      fail(string.format("%s: %s[%d] must be an integer >= %d, got %s", name, key, i, lo, fmt(m)))
    end
    if i > 1 and m <= v[i - 1] then
      fail(string.format("%s: %s must be increasing, got %s after %s", name, key, fmt(m), fmt(v[i - 1])))
    end
    r[i] = m
  end
  return r
end

-- How many of the increasing list xs are <= x (Python's bisect_right).
local function bisect_right(xs, x)
  local n = 0
  while n < #xs and xs[n + 1] <= x do n = n + 1 end
  return n
end

-- One function per group: f, or a table of one function per group.
local function lambdas(name, v, groups)
  local n, r = #groups, {}
  if type(v) == "function" then
    for i = 1, n do r[i] = v end
    return r
  end
  if type(v) == "table" and #v == n then
    for i = 1, n do
      if type(v[i]) ~= "function" then
        fail(string.format("%s: lr_lambda[%d] must be a function, got %s", name, i, fmt(v[i])))
      end
      r[i] = v[i]
    end
    return r
  end
  fail(string.format("%s: lr_lambda must be a function or a table of %d functions (one per param group), got %s",
    name, n, type(v) == "table" and string.format("a table of %d", #v) or fmt(v)))
end

-- Calls the lambda of group i at a step; its result must be a number.
local function call_lambda(self, i, epoch)
  local v = self.lr_lambdas[i](epoch)
  if type(v) ~= "number" then
    fail(string.format("%s: lr_lambda of param group %d returned %s at step %d; it must return a number",
      self.name, i, fmt(v), epoch))
  end
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

-- -- MultiStepLR, ExponentialLR ------------------------------------------------------------

--- MultiStepLR(optimizer, {milestones, gamma = 0.1}): lr = base_lr *
-- gamma^(the number of milestones <= step). milestones: increasing step counts.
-- @usage local sched = tide.optim.MultiStepLR(opt, { milestones = { 30, 80 }, gamma = 0.1 })
M.MultiStepLR = LRScheduler.class("MultiStepLR", {
  options = { milestones = true, gamma = true },
  fields = { "milestones", "gamma" },
  setup = function(self, _, opts)
    self.milestones = increasing("MultiStepLR", "milestones", opts.milestones, 0)
    self.gamma = at_least_zero("MultiStepLR", "gamma", opts.gamma == nil and 0.1 or opts.gamma)
  end,
  get_lr = function(self, epoch)
    local r, k = {}, bisect_right(self.milestones, epoch)
    for i, base in ipairs(self.base_lrs) do r[i] = base * self.gamma ^ k end
    return r
  end,
})

--- ExponentialLR(optimizer, {gamma}): lr = base_lr * gamma^step.
-- @usage local sched = tide.optim.ExponentialLR(opt, { gamma = 0.95 })
M.ExponentialLR = LRScheduler.class("ExponentialLR", {
  options = { gamma = true },
  fields = { "gamma" },
  setup = function(self, _, opts)
    self.gamma = at_least_zero("ExponentialLR", "gamma", opts.gamma)
  end,
  get_lr = function(self, epoch)
    local r = {}
    for i, base in ipairs(self.base_lrs) do r[i] = base * self.gamma ^ epoch end
    return r
  end,
})

-- -- LambdaLR, MultiplicativeLR -----------------------------------------------------------

--- LambdaLR(optimizer, {lr_lambda}): lr = base_lr * lr_lambda(step). lr_lambda
-- is a function of the step count (from 0) or a table of one per param group.
-- state_dict leaves the functions out, as PyTorch does.
-- @usage local sched = tide.optim.LambdaLR(opt, { lr_lambda = function(e) return 0.95 ^ e end })
M.LambdaLR = LRScheduler.class("LambdaLR", {
  options = { lr_lambda = true },
  fields = {},
  setup = function(self, optimizer, opts)
    self.lr_lambdas = lambdas("LambdaLR", opts.lr_lambda, optimizer.param_groups)
  end,
  get_lr = function(self, epoch)
    local r = {}
    for i, base in ipairs(self.base_lrs) do r[i] = base * call_lambda(self, i, epoch) end
    return r
  end,
})

--- MultiplicativeLR(optimizer, {lr_lambda}): each step after the first
-- multiplies the group's current lr by lr_lambda(step) (a function, or a table
-- of one per param group). state_dict leaves the functions out.
-- @usage local sched = tide.optim.MultiplicativeLR(opt, { lr_lambda = function() return 0.95 end })
M.MultiplicativeLR = LRScheduler.class("MultiplicativeLR", {
  options = { lr_lambda = true },
  fields = {},
  setup = function(self, optimizer, opts)
    self.lr_lambdas = lambdas("MultiplicativeLR", opts.lr_lambda, optimizer.param_groups)
  end,
  get_lr = function(self, epoch)
    local r = {}
    for i, group in ipairs(self.optimizer.param_groups) do
      r[i] = epoch > 0 and group.lr * call_lambda(self, i, epoch) or group.lr
    end
    return r
  end,
})

-- -- LinearLR, ConstantLR, PolynomialLR ----------------------------------------------------

--- LinearLR(optimizer, {start_factor = 1/3, end_factor = 1, total_iters = 5}):
-- lr = base_lr * (start_factor + (end_factor - start_factor) * min(step, total_iters) / total_iters).
-- @usage local warmup = tide.optim.LinearLR(opt, { start_factor = 0.01, total_iters = 100 })
M.LinearLR = LRScheduler.class("LinearLR", {
  options = { start_factor = true, end_factor = true, total_iters = true },
  fields = { "start_factor", "end_factor", "total_iters" },
  setup = function(self, _, opts)
    local N = "LinearLR"
    self.start_factor = in_range(N, "start_factor", opts.start_factor == nil and 1 / 3 or opts.start_factor, 0, 1,
      true, false)
    self.end_factor = in_range(N, "end_factor", opts.end_factor == nil and 1 or opts.end_factor, 0, 1)
    self.total_iters = positive_integer(N, "total_iters", opts.total_iters == nil and 5 or opts.total_iters)
  end,
  get_lr = function(self, epoch)
    local r, a, b, n = {}, self.start_factor, self.end_factor, self.total_iters
    for i, base in ipairs(self.base_lrs) do r[i] = base * (a + (b - a) * math.min(n, epoch) / n) end
    return r
  end,
})

--- ConstantLR(optimizer, {factor = 1/3, total_iters = 5}): lr = base_lr * factor
-- for the first total_iters steps, base_lr from then on.
-- @usage local sched = tide.optim.ConstantLR(opt, { factor = 0.5, total_iters = 4 })
M.ConstantLR = LRScheduler.class("ConstantLR", {
  options = { factor = true, total_iters = true },
  fields = { "factor", "total_iters" },
  setup = function(self, _, opts)
    self.factor = in_range("ConstantLR", "factor", opts.factor == nil and 1 / 3 or opts.factor, 0, 1)
    -- 0 is refused: PyTorch's closed form and its step-by-step form disagree there
    self.total_iters = positive_integer("ConstantLR", "total_iters", opts.total_iters == nil and 5 or opts.total_iters)
  end,
  get_lr = function(self, epoch)
    local r, f = {}, self.factor
    for i, base in ipairs(self.base_lrs) do r[i] = base * (f + (epoch >= self.total_iters and 1 - f or 0)) end
    return r
  end,
})

--- PolynomialLR(optimizer, {total_iters = 5, power = 1}):
-- lr = base_lr * (1 - min(step, total_iters) / total_iters)^power (0 from total_iters on).
-- @usage local sched = tide.optim.PolynomialLR(opt, { total_iters = 100, power = 2 })
M.PolynomialLR = LRScheduler.class("PolynomialLR", {
  options = { total_iters = true, power = true },
  fields = { "total_iters", "power" },
  setup = function(self, _, opts)
    self.total_iters = positive_integer("PolynomialLR", "total_iters",
      opts.total_iters == nil and 5 or opts.total_iters)
    self.power = at_least_zero("PolynomialLR", "power", opts.power == nil and 1 or opts.power)
  end,
  get_lr = function(self, epoch)
    local r, n = {}, self.total_iters
    for i, base in ipairs(self.base_lrs) do r[i] = base * (1 - math.min(n, epoch) / n) ^ self.power end
    return r
  end,
})

-- -- CosineAnnealingWarmRestarts -----------------------------------------------------------

--- CosineAnnealingWarmRestarts(optimizer, {T_0, T_mult = 1, eta_min = 0}): SGDR.
-- lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * T_cur / T_i)) / 2, where
-- T_cur counts the steps since the last restart and T_i, the length of the
-- current cycle, starts at T_0 and is multiplied by T_mult at each restart.
-- step(epoch) also takes a fractional epoch (step(e + i / iters) within an epoch).
-- @usage local sched = tide.optim.CosineAnnealingWarmRestarts(opt, { T_0 = 10, T_mult = 2 })
M.CosineAnnealingWarmRestarts = LRScheduler.class("CosineAnnealingWarmRestarts", {
  options = { T_0 = true, T_mult = true, eta_min = true },
  fields = { "T_0", "T_mult", "eta_min", "T_i", "T_cur" },
  setup = function(self, _, opts)
    local N = "CosineAnnealingWarmRestarts"
    self.T_0 = positive_integer(N, "T_0", opts.T_0)
    self.T_mult = positive_integer(N, "T_mult", opts.T_mult == nil and 1 or opts.T_mult)
    self.eta_min = number(N, "eta_min", opts.eta_min or 0)
    self.T_i, self.T_cur = self.T_0, -1
  end,
  get_lr = function(self)
    local r, eta_min = {}, self.eta_min
    for i, base in ipairs(self.base_lrs) do
      r[i] = eta_min + (base - eta_min) * (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2
    end
    return r
  end,
  step = function(self, epoch)
    if epoch == nil and self.last_epoch < 0 then epoch = 0 end
    local T_0, T_mult = self.T_0, self.T_mult
    if epoch == nil then
      epoch = self.last_epoch + 1
      self.T_cur = self.T_cur + 1
      if self.T_cur >= self.T_i then
        self.T_cur = self.T_cur - self.T_i
        self.T_i = self.T_i * T_mult
      end
    else
      if type(epoch) ~= "number" or not (epoch >= 0) then
        fail(string.format("CosineAnnealingWarmRestarts: step: epoch must be a number >= 0, got %s", fmt(epoch)))
      end
      if epoch >= T_0 then
        if T_mult == 1 then
          self.T_cur = math.fmod(epoch, T_0)
        else
          local n = math.floor(math.log(epoch / T_0 * (T_mult - 1) + 1) / math.log(T_mult))
          self.T_cur = epoch - T_0 * (T_mult ^ n - 1) / (T_mult - 1)
          self.T_i = T_0 * T_mult ^ n
        end
      else
        self.T_i, self.T_cur = T_0, epoch
      end
      epoch = math.floor(epoch)
    end
    self:_set_lrs(self:get_lr(), epoch)
  end,
})

-- -- SequentialLR --------------------------------------------------------------------------

-- A schedule of schedules' state: its own, and each of its schedulers' under _schedulers.
local function schedules_state_dict(self)
  local sd = LRScheduler.state_dict(self)
  sd._schedulers = {}
  for i, s in ipairs(self.schedulers) do sd._schedulers[i] = s:state_dict() end
  return sd
end
local function schedules_load_state_dict(self, sd)
  if type(sd) == "table" and (type(sd._schedulers) ~= "table" or #sd._schedulers ~= #self.schedulers) then
    fail(string.format("%s: load_state_dict: '_schedulers' must be a table of %d scheduler states, got %s",
      self.name, #self.schedulers, type(sd._schedulers) == "table" and string.format("%d", #sd._schedulers) or
      fmt(sd._schedulers)))
  end
  LRScheduler.load_state_dict(self, sd)
  for i, s in ipairs(self.schedulers) do s:load_state_dict(sd._schedulers[i]) end
end

--- SequentialLR(optimizer, schedulers, milestones), or SequentialLR(optimizer,
-- {schedulers = ..., milestones = ...}): runs schedulers[1] until step
-- milestones[1], then schedulers[2] restarted from its step 0, and so on
-- (#milestones = #schedulers - 1, increasing). The schedulers must be built
-- on the same optimizer; constructing this resets the lrs to the initial ones
-- and undoes the step each of them took when it was built.
-- @usage local warm = tide.optim.LinearLR(opt, { start_factor = 0.1, total_iters = 5 })
--   local cos = tide.optim.CosineAnnealingLR(opt, { T_max = 95 })
--   local sched = tide.optim.SequentialLR(opt, { warm, cos }, { 5 })
M.SequentialLR = LRScheduler.class("SequentialLR", {
  options = { schedulers = true, milestones = true },
  fields = { "milestones" },
  setup = function(self, optimizer, opts)
    local N = "SequentialLR"
    local scheds = opts.schedulers
    self.schedulers = scheduler_list(N, scheds, optimizer, "sequenced", "the one passed in")
    self.milestones = increasing(N, "milestones", opts.milestones, 1)
    if #self.milestones ~= #scheds - 1 then
      fail(string.format("%s: expects one milestone fewer than schedulers, got %d schedulers and %d milestones", N,
        #scheds, #self.milestones))
    end
  end,
  _initial_step = function(self)
    restart_lrs(self)
    for _, s in ipairs(self.schedulers) do s.last_epoch = s.last_epoch - 1 end
    local first = self.schedulers[1]
    first._step_count = 0
    first:step()
    self.last_epoch, self._step_count = 0, 1
    self._last_lr = first:get_last_lr()
  end,
  step = function(self)
    self.last_epoch = self.last_epoch + 1
    self._step_count = self._step_count + 1
    local idx = bisect_right(self.milestones, self.last_epoch)
    local s = self.schedulers[idx + 1]
    if idx > 0 and self.milestones[idx] == self.last_epoch then s:step(0) else s:step() end
    self._last_lr = s:get_last_lr()
  end,
  state_dict = schedules_state_dict,
  load_state_dict = schedules_load_state_dict,
})

do   -- SequentialLR(optimizer, schedulers, milestones), PyTorch's positional form, too
  local Seq = M.SequentialLR
  local new = Seq.new
  Seq.new = function(optimizer, schedulers, milestones)
    if milestones ~= nil or (type(schedulers) == "table" and schedulers[1] ~= nil) then
      return new(optimizer, { schedulers = schedulers, milestones = milestones })
    end
    return new(optimizer, schedulers)
  end
  getmetatable(Seq).__call = function(_, ...) return Seq.new(...) end
end

-- -- ReduceLROnPlateau ---------------------------------------------------------------------

--- ReduceLROnPlateau(optimizer, {mode = 'min', factor = 0.1, patience = 10,
-- threshold = 1e-4, threshold_mode = 'rel', cooldown = 0, min_lr = 0,
-- eps = 1e-8}): step(metric) multiplies each group's lr by factor (not below
-- min_lr, a number or one per group; changes smaller than eps are skipped)
-- once the metric has not improved for more than patience steps, then waits
-- cooldown steps before counting again. Improving means below best * (1 -
-- threshold) ('min', 'rel'), best - threshold ('min', 'abs'), above best * (1 +
-- threshold) or best + threshold ('max'). The metric is a number or a
-- one-element tensor, which step reads to the host (as PyTorch does).
-- @usage local sched = tide.optim.ReduceLROnPlateau(opt, { patience = 3 })
--   for epoch = 1, n do train(); sched:step(validation_loss) end
M.ReduceLROnPlateau = LRScheduler.class("ReduceLROnPlateau", {
  options = { mode = true, factor = true, patience = true, threshold = true, threshold_mode = true, cooldown = true,
              min_lr = true, eps = true },
  fields = { "mode", "factor", "patience", "threshold", "threshold_mode", "cooldown", "min_lrs", "eps", "best",
             "num_bad_epochs", "cooldown_counter", "mode_worse" },
  setup = function(self, optimizer, opts)
    local N = "ReduceLROnPlateau"
    local mode = opts.mode == nil and "min" or opts.mode
    if mode ~= "min" and mode ~= "max" then
      fail(string.format("%s: mode must be 'min' or 'max', got %s", N, fmt(mode)))
    end
    local tmode = opts.threshold_mode == nil and "rel" or opts.threshold_mode
    if tmode ~= "rel" and tmode ~= "abs" then
      fail(string.format("%s: threshold_mode must be 'rel' or 'abs', got %s", N, fmt(tmode)))
    end
    self.mode, self.threshold_mode = mode, tmode
    self.factor = in_range(N, "factor", opts.factor == nil and 0.1 or opts.factor, 0, 1, false, true)
    self.patience = non_negative_integer(N, "patience", opts.patience == nil and 10 or opts.patience)
    self.threshold = at_least_zero(N, "threshold", opts.threshold == nil and 1e-4 or opts.threshold)
    self.cooldown = non_negative_integer(N, "cooldown", opts.cooldown == nil and 0 or opts.cooldown)
    self.min_lrs = per_group(N, "min_lr", opts.min_lr == nil and 0 or opts.min_lr, optimizer.param_groups)
    for i, v in ipairs(self.min_lrs) do
      at_least_zero(N, type(opts.min_lr) == "table" and string.format("min_lr[%d]", i) or "min_lr", v)
    end
    self.eps = at_least_zero(N, "eps", opts.eps == nil and 1e-8 or opts.eps)
    self.mode_worse = mode == "min" and math.huge or -math.huge
    self.best, self.num_bad_epochs, self.cooldown_counter = self.mode_worse, 0, 0
  end,
  _initial_step = function(self)
    local lrs = {}
    for i, group in ipairs(self.optimizer.param_groups) do lrs[i] = group.lr end
    self.base_lrs, self._last_lr = lrs, copy(lrs)
    self.last_epoch, self._step_count = 0, 0
  end,
  get_lr = function(self)
    return self:get_last_lr()
  end,
  is_better = function(self, a, best)
    local t = self.threshold
    if self.mode == "min" then
      if self.threshold_mode == "rel" then return a < best * (1 - t) end
      return a < best - t
    end
    if self.threshold_mode == "rel" then return a > best * (t + 1) end
    return a > best + t
  end,
  step = function(self, metric)
    local current = metric
    if is_tensor(metric) then
      if metric:numel() ~= 1 then
        fail(string.format("ReduceLROnPlateau: step: the metric must be a number or a one-element tensor, got a " ..
          "tensor of %d elements", metric:numel()))
      end
      current = metric:item()
    elseif type(metric) ~= "number" then
      fail(string.format("ReduceLROnPlateau: step: the metric must be a number or a one-element tensor, got %s",
        fmt(metric)))
    end
    self.last_epoch = self.last_epoch + 1
    self._step_count = self._step_count + 1
    if self:is_better(current, self.best) then
      self.best, self.num_bad_epochs = current, 0
    else
      self.num_bad_epochs = self.num_bad_epochs + 1
    end
    if self.cooldown_counter > 0 then
      self.cooldown_counter = self.cooldown_counter - 1
      self.num_bad_epochs = 0   -- bad steps during the cooldown do not count
    end
    local groups = self.optimizer.param_groups
    if self.num_bad_epochs > self.patience then
      for i, group in ipairs(groups) do
        local old = group.lr
        local new = math.max(old * self.factor, self.min_lrs[i])
        if old - new > self.eps then group.lr = new end
      end
      self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
      self.optimizer:sync_hyperparameters()
    end
    local last = {}
    for i, group in ipairs(groups) do last[i] = group.lr end
    self._last_lr = last
  end,
})

-- The checks and helpers lr_scheduler_extra.lua shares with the classes here.
M._helpers = { positive_integer = positive_integer, number = number, at_least_zero = at_least_zero,
               per_group = per_group, copy = copy, fmt = fmt, anneal = anneal,
               need_scheduler_list = need_scheduler_list, scheduler_list = scheduler_list, restart_lrs = restart_lrs,
               schedules_state_dict = schedules_state_dict, schedules_load_state_dict = schedules_load_state_dict }

return M
