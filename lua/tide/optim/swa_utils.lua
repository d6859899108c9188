--- tide.optim.swa_utils: stochastic weight averaging, as torch.optim.swa_utils
-- has it: AveragedModel (a running SWA or EMA copy of a model), the averaging
-- functions, SWALR (anneals each group's lr to a constant swa_lr) and
-- update_bn (recomputes BatchNorm statistics for the averaged weights). The
-- averages are in-place engine ops on the copy's tensors: an update reads
-- nothing back to the host, so it can run inside a compiled step. Moving the
-- copy to another device is left to Module:to.
local B = require "bindings.ffi"
local T = require "tide.tensor"
local args = require "tide.args"
local autograd = require "tide.autograd"
local Module = require "tide.nn.module"
local L = require "tide.optim.lr_scheduler"

local fail, is_tensor, functions = B.fail, T.is_tensor, T.functions
local fmt = L._helpers.fmt

local M = {}

local function no_grad(fn)
  local prev = autograd.set_grad_enabled(false)
  local ok, err = pcall(fn)
  autograd.set_grad_enabled(prev)
  if not ok then error(err, 0) end
end

-- -- averaging functions --------------------------------------------------------------------

local function check_decay(name, decay)
  if type(decay) ~= "number" or not (decay >= 0 and decay <= 1) then
    fail(string.format("%s: decay must be a number in [0, 1], got %s", name, fmt(decay)))
  end
  return decay
end

--- get_ema_avg_fn(decay = 0.999): avg_fn(averaged, current, n) returning
-- decay * averaged + (1 - decay) * current, an exponential moving average.
-- @usage local ema = tide.optim.swa_utils.AveragedModel(net, { avg_fn = swa_utils.get_ema_avg_fn(0.99) })
function M.get_ema_avg_fn(decay)
  decay = check_decay("get_ema_avg_fn", decay == nil and 0.999 or decay)
  return function(averaged, current) return averaged * decay + current * (1 - decay) end
end

--- get_ema_multi_avg_fn(decay = 0.999): multi_avg_fn(averaged_list,
-- current_list, n) updating each averaged tensor in place to
-- lerp(averaged, current, 1 - decay) (floating point; others as get_ema_avg_fn).
-- @usage local ema = swa_utils.AveragedModel(net, { multi_avg_fn = swa_utils.get_ema_multi_avg_fn(0.99) })
function M.get_ema_multi_avg_fn(decay)
  decay = check_decay("get_ema_multi_avg_fn", decay == nil and 0.999 or decay)
  return function(averaged, current)
    for i, a in ipairs(averaged) do
      if a:is_floating_point() then
        a:lerp_(current[i], 1 - decay)
      else
        a:copy_(a * decay + current[i] * (1 - decay))
      end
    end
  end
end

--- get_swa_avg_fn(): avg_fn(averaged, current, n) returning averaged +
-- (current - averaged) / (n + 1), the running mean (n: a 0-d tensor).
-- @usage local f = swa_utils.get_swa_avg_fn()
function M.get_swa_avg_fn()
  return function(averaged, current, n) return averaged + (current - averaged) / (n + 1) end
end

--- get_swa_multi_avg_fn(): the in-place, list form of get_swa_avg_fn.
-- @usage local f = swa_utils.get_swa_multi_avg_fn()
function M.get_swa_multi_avg_fn()
  local f = M.get_swa_avg_fn()
  return function(averaged, current, n)
    for i, a in ipairs(averaged) do a:copy_(f(a, current[i], n)) end
  end
end

-- -- AveragedModel --------------------------------------------------------------------------

--- swa_utils.AveragedModel(model, {avg_fn, multi_avg_fn, use_buffers = false}):
-- a module holding a deep copy of model (self.module) and a buffer n_averaged
-- (0-d int64). update_parameters(model) folds model's parameters (and, with
-- use_buffers, its buffers) into the copy: the first update copies them,
-- later ones apply multi_avg_fn(averaged_list, current_list, n_averaged) in
-- place, or avg_fn(averaged, current, n_averaged) per tensor, or by default
-- the running mean (SWA). Without use_buffers the copy's buffers follow the
-- model's. Calling it calls the copy's forward.
-- @usage local swa = tide.optim.swa_utils.AveragedModel(net)
--   for epoch = 1, n do train(); swa:update_parameters(net) end
local AveragedModel = Module:extend("AveragedModel")
M.AveragedModel = AveragedModel

function AveragedModel:init(model, opts)
  local N = "AveragedModel"
  if not Module.is_module(model) then fail(string.format("%s: argument 1 must be a module, got %s", N, fmt(model))) end
  opts = args.options(opts, N, { avg_fn = true, multi_avg_fn = true, use_buffers = true })
  for _, k in ipairs { "avg_fn", "multi_avg_fn" } do
    if opts[k] ~= nil and type(opts[k]) ~= "function" then
      fail(string.format("%s: %s must be a function, got %s", N, k, fmt(opts[k])))
    end
  end
  self.module = model:clone()
  self.avg_fn, self.multi_avg_fn = opts.avg_fn, opts.multi_avg_fn
  self.use_buffers = args.need_bool(opts.use_buffers, N, "use_buffers")
  local p = model:parameters()[1] or model:buffers()[1]
  self:register_buffer("n_averaged", require("tide").zeros({}, { dtype = "int64", device = p and p:device() or nil }))
end

function AveragedModel:forward(...) return self.module(...) end

-- The tensors averaged: the parameters, then the buffers with use_buffers.
local function averaged_tensors(self, m)
  local r = m:parameters()
  if self.use_buffers then
    for _, b in ipairs(m:buffers()) do r[#r + 1] = b end
  end
  return r
end

--- Folds model's current weights into the average and counts it (see
-- AveragedModel). model must have the copy's structure.
-- @param model the module being trained
-- @usage swa:update_parameters(net)
function AveragedModel:update_parameters(model)
  local N = "AveragedModel: update_parameters"
  if not Module.is_module(model) then fail(string.format("%s: argument 1 must be a module, got %s", N, fmt(model))) end
  local mine, theirs = averaged_tensors(self, self.module), averaged_tensors(self, model)
  if #mine ~= #theirs then
    fail(string.format("%s: the model has %d tensors to average, the averaged copy %d", N, #theirs, #mine))
  end
  no_grad(function()
    local n = self.n_averaged
    local first = n:eq(0)
    local avg, cur = {}, {}
    for i, a in ipairs(mine) do
      local c = theirs[i]:detach()
      if c:device() ~= a:device() then c = c:to(a:device()) end
      if args.shape_str(c) ~= args.shape_str(a) then
        fail(string.format("%s: tensor %d has shape %s in the model, %s in the averaged copy", N, i,
          args.shape_str(c), args.shape_str(a)))
      end
      avg[i], cur[i] = a:detach(), c
    end
    local nd = n
    if #avg > 0 and n:device() ~= avg[1]:device() then nd = n:to(avg[1]:device()) end
    if self.multi_avg_fn then
      self.multi_avg_fn(avg, cur, nd)
    else
      local f = self.avg_fn or M.get_swa_avg_fn()
      for i, a in ipairs(avg) do a:copy_(f(a, cur[i], nd)) end
    end
    -- the first update copies (a fold at n = 0 would only round to the
    -- model's value), picked by a tensor condition so nothing is read back
    for i, a in ipairs(avg) do
      local fd = first
      if fd:device() ~= a:device() then fd = fd:to(a:device()) end
      a:copy_(functions.where(fd, cur[i], a))
    end
    if not self.use_buffers then
      local bm, bt = self.module:buffers(), model:buffers()
      for i, b in ipairs(bm) do
        if bt[i] then b:copy_(bt[i]:detach()) end
      end
    end
    n:add_(1)
  end)
end

-- -- SWALR ----------------------------------------------------------------------------------

local anneal = {
  cos = function(t) return (1 - math.cos(math.pi * t)) / 2 end,
  linear = function(t) return t end,
}

--- swa_utils.SWALR(optimizer, {swa_lr, anneal_epochs = 10, anneal_strategy =
-- "cos" | "linear"}): anneals each group's lr from its value to swa_lr (a
-- number or one per group) over anneal_epochs steps, then holds it there.
-- Each step recovers the starting lr from the group's current one, as
-- PyTorch's does, so an lr set by hand restarts the blend from there.
-- @usage local swa_sched = tide.optim.swa_utils.SWALR(opt, { swa_lr = 0.05, anneal_epochs = 5 })
M.SWALR = L.LRScheduler.class("SWALR", {
  options = { swa_lr = true, anneal_epochs = true, anneal_strategy = true },
  fields = { "anneal_epochs", "anneal_strategy" },
  setup = function(self, optimizer, opts)
    local N = "SWALR"
    if opts.swa_lr == nil then fail(N .. ": swa_lr is required") end
    local lrs = L._helpers.per_group(N, "swa_lr", opts.swa_lr, optimizer.param_groups)
    for i, group in ipairs(optimizer.param_groups) do group.swa_lr = lrs[i] end
    local strategy = opts.anneal_strategy == nil and "cos" or opts.anneal_strategy
    if not anneal[strategy] then
      fail(string.format("%s: anneal_strategy must be 'cos' or 'linear', got %s", N, fmt(strategy)))
    end
    self.anneal_strategy = strategy
    local e = opts.anneal_epochs == nil and 10 or opts.anneal_epochs
    if not args.is_int(e) or e < 0 then
      fail(string.format("%s: anneal_epochs must be a non-negative integer, got %s", N, fmt(e)))
    end
    self.anneal_epochs = e
  end,
  get_lr = function(self)
    local f, E = anneal[self.anneal_strategy], self.anneal_epochs
    local step = self._step_count   -- PyTorch's _step_count - 1: this counts steps already taken
    if E == 0 then step = math.max(1, step) end
    local prev_alpha = f(math.max(0, math.min(1, (step - 1) / math.max(1, E))))
    local alpha = f(math.max(0, math.min(1, step / math.max(1, E))))
    local r = {}
    for i, group in ipairs(self.optimizer.param_groups) do
      local start = prev_alpha == 1 and group.swa_lr or (group.lr - prev_alpha * group.swa_lr) / (1 - prev_alpha)
      r[i] = group.swa_lr * alpha + start * (1 - alpha)
    end
    return r
  end,
})

-- -- update_bn ------------------------------------------------------------------------------

local function is_batch_norm(m)
  local name, cls = m.__name, m.super
  while name do
    if name == "_BatchNorm" then return true end
    if cls == nil then return false end
    name, cls = cls.__name, cls.super
  end
  return false
end

-- An iterator over the loader's batches: a list, an iterator function, or
-- an object with iter() (a DataLoader).
local function batches(loader)
  if type(loader) == "function" then return loader end
  if type(loader) == "table" or type(loader) == "userdata" then
    if type(loader.iter) == "function" then return loader:iter() end
    if type(loader) == "table" and getmetatable(loader) == nil then
      local i = 0
      return function()
        i = i + 1
        return loader[i]
      end
    end
  end
  fail(string.format("update_bn: loader must be a list of batches, an iterator function or a DataLoader, got %s",
    fmt(loader)))
end

--- swa_utils.update_bn(loader, model [, device]): recomputes the running
-- statistics of every BatchNorm in model by one pass over loader in training
-- mode with a cumulative average (momentum nil), as PyTorch's does; then
-- restores the momenta and the training mode. A batch is a tensor or a table
-- whose first element is the input (an iterator may also return the input
-- first); device moves each input there first.
-- @usage swa_utils.update_bn(train_loader, swa_model)
function M.update_bn(loader, model, device)
  if not Module.is_module(model) then
    fail(string.format("update_bn: argument 2 must be a module, got %s", fmt(model)))
  end
  local it = batches(loader)
  local momenta, bns = {}, {}
  for _, m in ipairs(model:modules()) do
    if is_batch_norm(m) and m.track_running_stats then
      m:reset_running_stats()
      bns[#bns + 1] = m
      momenta[#bns] = m.momentum
    end
  end
  if #bns == 0 then return end
  local was_training = model.training
  model:train()
  for _, m in ipairs(bns) do m.momentum = nil end
  local ok, err = pcall(function()
    for x in it do
      if not is_tensor(x) and type(x) == "table" then x = x[1] end
      if not is_tensor(x) then fail(string.format("update_bn: a batch must be a tensor or a table whose first " ..
        "element is one, got %s", fmt(x))) end
      if device ~= nil then x = x:to(device) end
      no_grad(function() model(x) end)
    end
  end)
  for i, m in ipairs(bns) do m.momentum = momenta[i] end
  model:train(was_training)
  if not ok then error(err, 0) end
end

return M
