--- tide.optim.RAdam: Adam with the variance of its adaptive learning rate
-- rectified (Liu et al. 2019), as torch.optim.RAdam computes it. Whether a step
-- is rectified depends on the step count, a 0-d tensor: both branches are
-- computed and tide.where picks one, so that no step reads a value to the
-- host and a compiled step replays the right branch (PyTorch's capturable form).
local Optimizer = require "tide.optim.optimizer"
local T = require "tide.tensor"

local checks, where = Optimizer.checks, T.functions.where

--- RAdam(params, {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 0,
-- decoupled_weight_decay = false, maximize = false}). Per step t (counted per
-- parameter), with gradient g: g = -g if maximize; p = p (1 - lr weight_decay)
-- if decoupled_weight_decay, else g = g + weight_decay p; m = beta1 m + (1 - beta1) g;
-- v = beta2 v + (1 - beta2) g^2; rho_inf = 2 / (1 - beta2) - 1;
-- rho_t = rho_inf - 2 t beta2^t / (1 - beta2^t); while rho_t <= 5,
-- p = p - lr m / (1 - beta1^t); after, with
-- r = sqrt((rho_t - 4) (rho_t - 2) rho_inf / ((rho_inf - 4) (rho_inf - 2) rho_t)),
-- p = p - lr m / (1 - beta1^t) r sqrt(1 - beta2^t) / (sqrt(v) + eps).
-- @usage local opt = tide.optim.RAdam(params, { lr = 1e-3, weight_decay = 1e-2, decoupled_weight_decay = true })
local RAdam = Optimizer.class("RAdam", {
  defaults = { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0, decoupled_weight_decay = false,
               maximize = false },
  hypers = {
    { "lr", function(g) return g.lr end },
    { "beta1", function(g) return g.betas[1] end },
    { "beta2", function(g) return g.betas[2] end },
    { "eps", function(g) return g.eps end },
    { "weight_decay", function(g) return g.weight_decay end },
  },
  state_keys = { step = "step", exp_avg = "buffer", exp_avg_sq = "buffer" },
})

function RAdam.check(group, bad)
  checks.at_least_zero(group, "lr", bad)
  checks.at_least_zero(group, "eps", bad)
  checks.betas(group, bad)
  checks.at_least_zero(group, "weight_decay", bad)
  checks.boolean(group, "decoupled_weight_decay", bad)
  checks.boolean(group, "maximize", bad)
end

function RAdam.required_state() return { "step", "exp_avg", "exp_avg_sq" } end

function RAdam.init_state(p)
  local zeros = Optimizer.zeros_like
  return { step = Optimizer.scalar_tensor(0, p:device()), exp_avg = zeros(p), exp_avg_sq = zeros(p) }
end

function RAdam.derive(hy, group)
  local rho_inf = 2 / (1 - hy.beta2) - 1
  return {
    one_minus_beta1 = 1 - hy.beta1,
    one_minus_beta2 = 1 - hy.beta2,
    rho_inf = rho_inf,
    rect_den = (rho_inf - 4) * (rho_inf - 2),
    decay = group.decoupled_weight_decay and group.weight_decay ~= 0 and 1 - hy.lr * hy.weight_decay or nil,
  }
end

-- Seven passes over the parameter's memory (lerp_, mul_, addcmul_, sqrt, add_,
-- where, addcdiv_); weight decay and maximize add one each. Before
-- rectification the denominator is 1 and the factor lr / (beta1^t - 1), so
-- the one addcdiv_ serves both branches. The rectifier is NaN while
-- 2 < rho_t < 4, steps that take the other branch.
function RAdam.update(p, g, st, group, hy, d)
  if group.maximize then g = -g end
  local step = st.step
  step:add_(1)
  if group.weight_decay ~= 0 then
    if group.decoupled_weight_decay then p:mul_(d.decay) else g = g:add(p, hy.weight_decay) end
  end
  local m, v = st.exp_avg, st.exp_avg_sq
  m:lerp_(g, d.one_minus_beta1)                           -- beta1 m + (1 - beta1) g
  v:mul_(hy.beta2):addcmul_(g, g, d.one_minus_beta2)      -- beta2 v + (1 - beta2) g^2
  local beta2_t = hy.beta2 ^ step
  local bc2 = 1 - beta2_t
  local rho_t = d.rho_inf - 2 * step * beta2_t / bc2
  local rectified = rho_t:gt(5)
  local rect = ((rho_t - 4) * (rho_t - 2) * d.rho_inf / (d.rect_den * rho_t)):sqrt_()
  local factor = (hy.lr * where(rectified, rect * bc2:sqrt(), 1)):div_(hy.beta1 ^ step - 1)
  local denom = where(rectified, v:sqrt():add_(hy.eps), 1)   -- sqrt(v) + eps, or 1
  p:addcdiv_(m, denom, factor)
end

return RAdam
