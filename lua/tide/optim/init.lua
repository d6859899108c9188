--- tide.optim: optimizers and learning-rate schedules, as torch.optim has them.
--
--     local opt = tide.optim.Adam(model_params, { lr = 1e-3 })
--     local sched = tide.optim.OneCycleLR(opt, { max_lr = 1e-2, total_steps = 1000 })
--     for _ = 1, 1000 do
--       opt:zero_grad(); loss_fn():backward(); opt:step(); sched:step()
--     end
--
-- Optimizers: SGD, Adam, AdamW, RMSprop, Adagrad, Adadelta, Adamax, NAdam,
-- RAdam, Rprop, ASGD and LBFGS (Optimizer is their base, for new ones). They
-- take a tensor, a list of tensors or PyTorch's param groups ({ { params =
-- {...}, lr = 0.1 }, { params = {...} } }), then an options table. Every
-- update is a handful of in-place engine ops per parameter (no Lua loop over
-- elements), run under no_grad. LBFGS is the exception to what follows: its
-- step(closure) re-evaluates the loss and reads scalars to the host, as
-- PyTorch's does, and takes one param group only.
-- Schedules (lr_scheduler.X, also reachable as tide.optim.X): StepLR,
-- MultiStepLR, ExponentialLR, LambdaLR, MultiplicativeLR, LinearLR, ConstantLR,
-- PolynomialLR, CosineAnnealingLR, CosineAnnealingWarmRestarts, OneCycleLR,
-- CyclicLR, SequentialLR (one schedule after another), ChainedScheduler (several
-- at once, their factors multiplied) and ReduceLROnPlateau (step(metric):
-- it reads a tensor metric to the host, as PyTorch does; it runs between steps).
-- swa_utils: AveragedModel (SWA and EMA copies), SWALR and update_bn.
--
-- Hyperparameters and compiled steps. The groups' hyperparameters are plain Lua
-- values, read and written as PyTorch users do: `opt.param_groups[1].lr = 0.01`
-- takes effect on the next step. The update ops never read those Lua numbers.
-- Each group keeps one 0-d float64 tensor per numeric hyperparameter (lr,
-- momentum, dampening, weight_decay, beta1, beta2, eps, alpha, rho, lr_decay,
-- momentum_decay, Rprop's etas and step sizes, ASGD's lambd and t0; one set
-- per device its parameters live on):
-- `opt:hyperparameter_tensors(i [, device])`.
-- `opt:sync_hyperparameters()` copies each value that changed since its last
-- call into its tensor (one fill op each; nothing when nothing changed); step()
-- calls it first, and a scheduler's step() calls it after setting the new lr
-- and momentum. Everything that changes every step is a tensor too: each
-- parameter's step count (state.step, 0-d float64; NAdam's mu_product and
-- ASGD's eta and mu too), and the bias corrections, step sizes, decayed lrs,
-- 1 - beta factors and RAdam's rectification (both branches, one picked by
-- tide.where), computed from those tensors by engine ops.
-- So the ops a step enqueues are the same from one step to the next, and a
-- compiled (replayed) training step that captured them picks up a new lr once
-- the tensors hold it: set the field and call sync_hyperparameters() (or step
-- the scheduler) between replays. What decides which ops run (a weight decay,
-- momentum or lr_decay of 0 or not, nesterov, amsgrad, centered, maximize,
-- decoupled_weight_decay, and the first
-- step, which creates the state) is read from the Lua values: changing those
-- needs a new capture, as it does in PyTorch.
local Optimizer = require "tide.optim.optimizer"
local adam = require "tide.optim.adam"
local adamax = require "tide.optim.adamax"
local lr_scheduler = require "tide.optim.lr_scheduler_extra"   -- lr_scheduler with CyclicLR, ChainedScheduler

local M = {
  Optimizer = Optimizer,
  SGD = require "tide.optim.sgd",
  Adam = adam.Adam,
  AdamW = adam.AdamW,
  RMSprop = require "tide.optim.rmsprop",
  Adagrad = require "tide.optim.adagrad",
  Adadelta = require "tide.optim.adadelta",
  Adamax = adamax.Adamax,
  NAdam = adamax.NAdam,
  RAdam = require "tide.optim.radam",
  Rprop = require "tide.optim.rprop",
  ASGD = require "tide.optim.asgd",
  LBFGS = require "tide.optim.lbfgs",
  lr_scheduler = lr_scheduler,
}
for _, name in ipairs { "StepLR", "MultiStepLR", "ExponentialLR", "LambdaLR", "MultiplicativeLR", "LinearLR",
                        "ConstantLR", "PolynomialLR", "CosineAnnealingLR", "CosineAnnealingWarmRestarts",
                        "OneCycleLR", "SequentialLR", "ReduceLROnPlateau", "CyclicLR", "ChainedScheduler" } do
  M[name] = lr_scheduler[name]
end

-- swa_utils (AveragedModel, SWALR, update_bn) builds on tide.nn, which needs
-- tide loaded: it is loaded on first use.
setmetatable(M, { __index = function(t, k)
  if k ~= "swa_utils" then return nil end
  local v = require "tide.optim.swa_utils"
  rawset(t, k, v)
  return v
end })

return M
