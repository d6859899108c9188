--- tide.optim.lr_scheduler, continued: CyclicLR and ChainedScheduler, with the
-- chainable (recursive) forms of the closed-form schedules that
-- ChainedScheduler steps. The classes are added to tide.optim.lr_scheduler;
-- the base class and the other schedules are in lr_scheduler.lua. A plain
-- step() keeps using the closed forms, so chaining only happens under a
-- ChainedScheduler.
local L = require "tide.optim.lr_scheduler"
local fail = require("bindings.ffi").fail

local LRScheduler = L.LRScheduler
local h = L._helpers
local fmt, copy, per_group = h.fmt, h.copy, h.per_group

-- -- CyclicLR ------------------------------------------------------------------------------

local scale_fns = {
  triangular = function() return 1 end,
  triangular2 = function(x) return 1 / 2 ^ (x - 1) end,
}

-- A number > 0.
local function positive_number(name, key, v)
  if type(v) ~= "number" or not (v > 0) then
    fail(string.format("%s: %s must be a number > 0, got %s", name, key, fmt(v)))
  end
  return v
end

-- The scale function and scale mode of a CyclicLR: scale_fn(x) where given,
-- else the mode's (exp_range's is gamma^x over iterations).
local function scale_of(self)
  if self.scale_fn then return self.scale_fn, self.scale_mode end
  if self.mode == "exp_range" then
    local gamma = self.gamma
    return function(x) return gamma ^ x end, "iterations"
  end
  return scale_fns[self.mode], "cycle"
end

-- Sets the groups' momentum (or beta1) to m[i].
local function set_momenta(self, m)
  for i, group in ipairs(self.optimizer.param_groups) do
    if self.use_beta1 then group.betas = { m[i], group.betas[2] } else group.momentum = m[i] end
  end
end

--- CyclicLR(optimizer, {base_lr, max_lr, step_size_up = 2000, step_size_down =
-- step_size_up, mode = "triangular" | "triangular2" | "exp_range", gamma = 1,
-- scale_fn, scale_mode = "cycle" | "iterations", cycle_momentum = true,
-- base_momentum = 0.8, max_momentum = 0.9}): the cyclical learning rate
-- policy. The lr climbs from base_lr to max_lr over step_size_up steps and
-- back over step_size_down, the amplitude scaled by scale_fn of the cycle
-- number (from 1) or of the step count: 1 (triangular), 1/2^(cycle-1)
-- (triangular2), gamma^step (exp_range), or the scale_fn given (mode is then
-- ignored). The momentum (or beta1) moves the other way between max_momentum
-- and base_momentum. base_lr, max_lr and the momenta may be tables, one value
-- per param group. The constructor sets the groups' lr to base_lr. Step it
-- after every batch. state_dict leaves scale_fn out, as PyTorch does.
-- @usage local sched = tide.optim.CyclicLR(opt, { base_lr = 0.01, max_lr = 0.1, step_size_up = 500 })
L.CyclicLR = LRScheduler.class("CyclicLR", {
  options = { base_lr = true, max_lr = true, step_size_up = true, step_size_down = true, mode = true, gamma = true,
              scale_fn = true, scale_mode = true, cycle_momentum = true, base_momentum = true, max_momentum = true },
  fields = { "cyclic_base_lrs", "max_lrs", "total_size", "step_ratio", "mode", "gamma", "scale_mode",
             "cycle_momentum", "use_beta1", "base_momentums", "max_momentums" },
  setup = function(self, optimizer, opts)
    local N = "CyclicLR"
    local groups = optimizer.param_groups
    if opts.base_lr == nil then fail(N .. ": base_lr is required") end
    if opts.max_lr == nil then fail(N .. ": max_lr is required") end
    self.cyclic_base_lrs = per_group(N, "base_lr", opts.base_lr, groups)
    self.max_lrs = per_group(N, "max_lr", opts.max_lr, groups)
    for i, group in ipairs(groups) do group.lr = self.cyclic_base_lrs[i] end
    local up = positive_number(N, "step_size_up", opts.step_size_up == nil and 2000 or opts.step_size_up)
    local down = up
    if opts.step_size_down ~= nil then down = positive_number(N, "step_size_down", opts.step_size_down) end
    self.total_size, self.step_ratio = up + down, up / (up + down)
    local mode = opts.mode == nil and "triangular" or opts.mode
    if opts.scale_fn ~= nil and type(opts.scale_fn) ~= "function" then
      fail(string.format("%s: scale_fn must be a function, got %s", N, fmt(opts.scale_fn)))
    end
    if opts.scale_fn == nil and mode ~= "triangular" and mode ~= "triangular2" and mode ~= "exp_range" then
      fail(string.format("%s: mode must be 'triangular', 'triangular2' or 'exp_range' (or give scale_fn), got %s",
        N, fmt(mode)))
    end
    local smode = opts.scale_mode == nil and "cycle" or opts.scale_mode
    if smode ~= "cycle" and smode ~= "iterations" then
      fail(string.format("%s: scale_mode must be 'cycle' or 'iterations', got %s", N, fmt(smode)))
    end
    self.mode, self.scale_fn, self.scale_mode = mode, opts.scale_fn, smode
    self.gamma = h.number(N, "gamma", opts.gamma == nil and 1 or opts.gamma)
    local cycle = opts.cycle_momentum
    if cycle == nil then cycle = true end
    if type(cycle) ~= "boolean" then
      fail(string.format("%s: cycle_momentum must be a boolean, got %s", N, fmt(cycle)))
    end
    self.cycle_momentum, self.use_beta1, self.base_momentums, self.max_momentums = cycle, false, {}, {}
    if cycle then
      local defaults = optimizer.defaults
      if defaults.momentum == nil and defaults.betas == nil then
        fail(string.format("%s: cycle_momentum needs an optimizer with momentum or betas; %s has neither " ..
          "(pass cycle_momentum = false)", N, optimizer.name))
      end
      self.use_beta1 = defaults.betas ~= nil
      self.base_momentums = per_group(N, "base_momentum", opts.base_momentum == nil and 0.8 or opts.base_momentum,
        groups)
      self.max_momentums = per_group(N, "max_momentum", opts.max_momentum == nil and 0.9 or opts.max_momentum, groups)
      set_momenta(self, self.max_momentums)
      for i, group in ipairs(groups) do
        group.max_momentum, group.base_momentum = self.max_momentums[i], self.base_momentums[i]
      end
    end
  end,
  get_lr = function(self, step)
    local cycle = math.floor(1 + step / self.total_size)
    local x = 1 + step / self.total_size - cycle
    local factor
    if x <= self.step_ratio then factor = x / self.step_ratio else factor = (x - 1) / (self.step_ratio - 1) end
    local fn, smode = scale_of(self)
    local scale = fn(smode == "cycle" and cycle or step)
    if type(scale) ~= "number" then
      fail(string.format("CyclicLR: scale_fn returned %s at step %d; it must return a number", fmt(scale), step))
    end
    local lrs = {}
    for i, base in ipairs(self.cyclic_base_lrs) do lrs[i] = base + (self.max_lrs[i] - base) * factor * scale end
    if self.cycle_momentum then
      local m = {}
      for i, maxm in ipairs(self.max_momentums) do m[i] = maxm - (maxm - self.base_momentums[i]) * factor * scale end
      set_momenta(self, m)
    end
    return lrs
  end,
})

-- -- chainable forms -----------------------------------------------------------------------

-- PyTorch's recursive get_lr of each closed-form schedule: the lr at step
-- `epoch` from the groups' current lr, so the factors of several schedules
-- on one optimizer multiply. Schedules without one (LambdaLR, OneCycleLR,
-- CyclicLR, CosineAnnealingWarmRestarts) set their closed form, as in PyTorch.
local function each_group(self, f)
  local r = {}
  for i, group in ipairs(self.optimizer.param_groups) do r[i] = f(group.lr, i) end
  return r
end
local function keep(lr) return lr end

L.StepLR.chain_lr = function(self, epoch)
  if epoch == 0 or epoch % self.step_size ~= 0 then return each_group(self, keep) end
  return each_group(self, function(lr) return lr * self.gamma end)
end

L.MultiStepLR.chain_lr = function(self, epoch)
  for _, m in ipairs(self.milestones) do
    if m == epoch then return each_group(self, function(lr) return lr * self.gamma end) end
  end
  return each_group(self, keep)
end

L.ExponentialLR.chain_lr = function(self, epoch)
  if epoch == 0 then return each_group(self, keep) end
  return each_group(self, function(lr) return lr * self.gamma end)
end

L.MultiplicativeLR.chain_lr = L.MultiplicativeLR.get_lr

L.LinearLR.chain_lr = function(self, epoch)
  local a, b, n = self.start_factor, self.end_factor, self.total_iters
  if epoch == 0 then return each_group(self, function(lr) return lr * a end) end
  if epoch > n then return each_group(self, keep) end
  return each_group(self, function(lr) return lr * (1 + (b - a) / (n * a + (epoch - 1) * (b - a))) end)
end

L.ConstantLR.chain_lr = function(self, epoch)
  if epoch == 0 then return each_group(self, function(lr) return lr * self.factor end) end
  if epoch ~= self.total_iters then return each_group(self, keep) end
  return each_group(self, function(lr) return lr * (1 / self.factor) end)
end

L.PolynomialLR.chain_lr = function(self, epoch)
  local n = self.total_iters
  if epoch == 0 or epoch > n then return each_group(self, keep) end
  local decay = ((1 - epoch / n) / (1 - (epoch - 1) / n)) ^ self.power
  return each_group(self, function(lr) return lr * decay end)
end

L.CosineAnnealingLR.chain_lr = function(self, epoch)
  local T, eta_min = self.T_max, self.eta_min
  if epoch == 0 then return each_group(self, keep) end
  if (epoch - 1 - T) % (2 * T) == 0 then
    return each_group(self, function(lr, i)
      return lr + (self.base_lrs[i] - eta_min) * (1 - math.cos(math.pi / T)) / 2
    end)
  end
  local ratio = (1 + math.cos(math.pi * epoch / T)) / (1 + math.cos(math.pi * (epoch - 1) / T))
  return each_group(self, function(lr) return ratio * (lr - eta_min) + eta_min end)
end

-- -- ChainedScheduler ----------------------------------------------------------------------

-- Steps s to `epoch` as a link of a chain: its chainable form where it has one.
local function chain_step(s, epoch)
  if s.chain_lr then s:_set_lrs(s:chain_lr(epoch), epoch) else s:step() end
end

--- ChainedScheduler(schedulers [, optimizer]): steps every scheduler of the
-- list, in order, at each step(), each from the lr the one before it left, so
-- their factors multiply (ExponentialLR then ConstantLR: base_lr * gamma^t *
-- factor while t < total_iters). The schedulers must be built on one
-- optimizer, in the order listed: constructing this replays their step 0 in
-- that chain, as PyTorch's constructors did one after another.
-- @usage local sched = tide.optim.ChainedScheduler({ tide.optim.ConstantLR(opt, { factor = 0.1, total_iters = 2 }),
--   tide.optim.ExponentialLR(opt, { gamma = 0.9 }) })
L.ChainedScheduler = LRScheduler.class("ChainedScheduler", {
  options = { schedulers = true },
  fields = {},
  setup = function(self, optimizer, opts)
    self.schedulers = h.scheduler_list("ChainedScheduler", opts.schedulers, optimizer, "chained", "schedulers[1]")
  end,
  _initial_step = function(self)
    h.restart_lrs(self)
    local groups = self.optimizer.param_groups
    for _, s in ipairs(self.schedulers) do
      if s.chain_lr then
        local lrs = s:chain_lr(0)
        for i, group in ipairs(groups) do group.lr = lrs[i] end
        s._last_lr = copy(lrs)
      else
        for i, group in ipairs(groups) do group.lr = s._last_lr[i] end
      end
    end
    self.optimizer:sync_hyperparameters()
    self.last_epoch, self._step_count = 0, 1
    self._last_lr = self.schedulers[#self.schedulers]:get_last_lr()
  end,
  step = function(self)
    self.last_epoch = self.last_epoch + 1
    self._step_count = self._step_count + 1
    for _, s in ipairs(self.schedulers) do chain_step(s, s.last_epoch + 1) end
    self._last_lr = self.schedulers[#self.schedulers]:get_last_lr()
  end,
  state_dict = h.schedules_state_dict,
  load_state_dict = h.schedules_load_state_dict,
})

do   -- ChainedScheduler(schedulers [, optimizer]), PyTorch's argument order
  local Chained = L.ChainedScheduler
  local new = Chained.new
  Chained.new = function(schedulers, optimizer)
    h.need_scheduler_list("ChainedScheduler", schedulers)
    if optimizer == nil then
      optimizer = type(schedulers[1]) == "table" and schedulers[1].optimizer or nil
      if optimizer == nil then
        fail(string.format("ChainedScheduler: schedulers[1] must be a scheduler, got %s", fmt(schedulers[1])))
      end
    end
    return new(optimizer, { schedulers = schedulers })
  end
  getmetatable(Chained).__call = function(_, ...) return Chained.new(...) end
end

return L
