--- tide.optim.Adagrad: the adaptive gradient algorithm, with lr decay, weight
-- decay (L2), an initial accumulator value and maximize, as torch.optim.Adagrad
-- computes it (dense gradients; sparse ones are left out). The decayed lr comes
-- from the per-parameter step tensor by 0-d engine ops, so a compiled step sees it.
local Optimizer = require "tide.optim.optimizer"

local checks = Optimizer.checks

--- Adagrad(params, {lr = 1e-2, lr_decay = 0, weight_decay = 0,
-- initial_accumulator_value = 0, eps = 1e-10, maximize = false}). Per step t
-- (counted per parameter), with gradient g: g = -g if maximize;
-- g = g + weight_decay * p; clr = lr / (1 + (t - 1) * lr_decay);
-- sum = sum + g^2 (sum starts at initial_accumulator_value);
-- p = p - clr * g / (sqrt(sum) + eps).
-- @usage local opt = tide.optim.Adagrad(params, { lr = 0.1, lr_decay = 1e-4 })
local Adagrad = Optimizer.class("Adagrad", {
  defaults = { lr = 1e-2, lr_decay = 0, weight_decay = 0, initial_accumulator_value = 0, eps = 1e-10,
               maximize = false },
  hypers = {
    { "lr", function(g) return g.lr end },
    { "lr_decay", function(g) return g.lr_decay end },
    { "weight_decay", function(g) return g.weight_decay end },
    { "eps", function(g) return g.eps end },
  },
  state_keys = { step = "step", sum = "buffer" },
})

function Adagrad.check(group, bad)
  checks.at_least_zero(group, "lr", bad)
  checks.at_least_zero(group, "lr_decay", bad)
  checks.at_least_zero(group, "weight_decay", bad)
  checks.at_least_zero(group, "initial_accumulator_value", bad)
  checks.at_least_zero(group, "eps", bad)
  checks.boolean(group, "maximize", bad)
end

function Adagrad.required_state() return { "step", "sum" } end

function Adagrad.init_state(p, group)
  local sum = Optimizer.zeros_like(p)
  if group.initial_accumulator_value ~= 0 then sum:fill_(group.initial_accumulator_value) end
  return { step = Optimizer.scalar_tensor(0, p:device()), sum = sum }
end

function Adagrad.derive(hy)
  return { neg_lr = -hy.lr }
end

-- Four passes over the parameter's memory (addcmul_, sqrt, add_, addcdiv_);
-- weight decay and maximize add one each. A non-zero lr_decay adds four 0-d ops.
function Adagrad.update(p, g, st, group, hy, d)
  if group.maximize then g = -g end
  local step = st.step
  step:add_(1)
  if group.weight_decay ~= 0 then g = g:add(p, hy.weight_decay) end
  local neg_clr = d.neg_lr
  if group.lr_decay ~= 0 then neg_clr = d.neg_lr / ((step - 1) * hy.lr_decay + 1) end
  local sum = st.sum
  sum:addcmul_(g, g)                                      -- sum + g^2
  local std = sum:sqrt():add_(hy.eps)
  p:addcdiv_(g, std, neg_clr)
end

return Adagrad
