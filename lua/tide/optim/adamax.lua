--- tide.optim.Adamax and tide.optim.NAdam: the infinity-norm variant of Adam,
-- and Adam with Nesterov momentum (and its momentum-decay schedule), as
-- torch.optim.Adamax / NAdam compute them. As in Adam, the step count (and
-- NAdam's running product of momenta) are 0-d float64 tensors per parameter,
-- and every factor derived from them is computed by engine ops.
local Optimizer = require "tide.optim.optimizer"

local checks = Optimizer.checks

-- The options Adamax and NAdam share; extra(group, bad) checks the rest.
local function check_with(extra)
  return function(group, bad)
    checks.at_least_zero(group, "lr", bad)
    checks.at_least_zero(group, "eps", bad)
    checks.betas(group, bad)
    checks.at_least_zero(group, "weight_decay", bad)
    checks.boolean(group, "maximize", bad)
    if extra then extra(group, bad) end
  end
end

-- -- Adamax -------------------------------------------------------------------------------

--- Adamax(params, {lr = 2e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 0,
-- maximize = false}). Per step t (counted per parameter), with gradient g:
-- g = -g if maximize; g = g + weight_decay * p; m = beta1 m + (1 - beta1) g;
-- u = max(beta2 u, |g| + eps); p = p - lr / (1 - beta1^t) * m / u.
-- @usage local opt = tide.optim.Adamax(params, { lr = 2e-3 })
local Adamax = Optimizer.class("Adamax", {
  defaults = { lr = 2e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0, maximize = false },
  hypers = {
    { "lr", function(g) return g.lr end },
    { "beta1", function(g) return g.betas[1] end },
    { "beta2", function(g) return g.betas[2] end },
    { "eps", function(g) return g.eps end },
    { "weight_decay", function(g) return g.weight_decay end },
  },
  state_keys = { step = "step", exp_avg = "buffer", exp_inf = "buffer" },
  check = check_with(nil),
})

function Adamax.required_state() return { "step", "exp_avg", "exp_inf" } end

function Adamax.init_state(p)
  local zeros = Optimizer.zeros_like
  return { step = Optimizer.scalar_tensor(0, p:device()), exp_avg = zeros(p), exp_inf = zeros(p) }
end

function Adamax.derive(hy)
  return { one_minus_beta1 = 1 - hy.beta1 }
end

-- Six passes over the parameter's memory (lerp_, mul_, abs, add_, maximum_,
-- addcdiv_); weight decay and maximize add one each. lr / (beta1^t - 1) is -clr.
function Adamax.update(p, g, st, group, hy, d)
  if group.maximize then g = -g end
  local step = st.step
  step:add_(1)
  if group.weight_decay ~= 0 then g = g:add(p, hy.weight_decay) end
  local m, u = st.exp_avg, st.exp_inf
  m:lerp_(g, d.one_minus_beta1)                           -- beta1 m + (1 - beta1) g
  u:mul_(hy.beta2):maximum_(g:abs():add_(hy.eps))          -- max(beta2 u, |g| + eps)
  p:addcdiv_(m, u, hy.lr / (hy.beta1 ^ step - 1))
end

-- -- NAdam --------------------------------------------------------------------------------

--- NAdam(params, {lr = 2e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 0,
-- momentum_decay = 4e-3, decoupled_weight_decay = false, maximize = false}).
-- Per step t (counted per parameter), with gradient g: g = -g if maximize;
-- p = p (1 - lr weight_decay) if decoupled_weight_decay, else
-- g = g + weight_decay * p; mu_t = beta1 (1 - 0.96^(t momentum_decay) / 2);
-- P_t = mu_1 ... mu_t; m = beta1 m + (1 - beta1) g; v = beta2 v + (1 - beta2) g^2;
-- d = sqrt(v / (1 - beta2^t)) + eps;
-- p = p - lr (1 - mu_t) / (1 - P_t) g / d - lr mu_{t+1} / (1 - P_t mu_{t+1}) m / d.
-- @usage local opt = tide.optim.NAdam(params, { lr = 2e-3, momentum_decay = 4e-3 })
local NAdam = Optimizer.class("NAdam", {
  defaults = { lr = 2e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0, momentum_decay = 4e-3,
               decoupled_weight_decay = false, maximize = false },
  hypers = {
    { "lr", function(g) return g.lr end },
    { "beta1", function(g) return g.betas[1] end },
    { "beta2", function(g) return g.betas[2] end },
    { "eps", function(g) return g.eps end },
    { "weight_decay", function(g) return g.weight_decay end },
    { "momentum_decay", function(g) return g.momentum_decay end },
  },
  state_keys = { step = "step", mu_product = "step", exp_avg = "buffer", exp_avg_sq = "buffer" },
  check = check_with(function(group, bad)
    checks.at_least_zero(group, "momentum_decay", bad)
    checks.boolean(group, "decoupled_weight_decay", bad)
  end),
})

function NAdam.required_state() return { "step", "mu_product", "exp_avg", "exp_avg_sq" } end

function NAdam.init_state(p)
  local zeros, dev = Optimizer.zeros_like, p:device()
  return { step = Optimizer.scalar_tensor(0, dev), mu_product = Optimizer.scalar_tensor(1, dev),
           exp_avg = zeros(p), exp_avg_sq = zeros(p) }
end

function NAdam.derive(hy, group)
  return {
    one_minus_beta1 = 1 - hy.beta1,
    one_minus_beta2 = 1 - hy.beta2,
    neg_lr = -hy.lr,
    decay = group.decoupled_weight_decay and group.weight_decay ~= 0 and 1 - hy.lr * hy.weight_decay or nil,
  }
end

-- Eight passes over the parameter's memory (lerp_, mul_, addcmul_, div, sqrt_,
-- add_ and two addcdiv_); weight decay and maximize add one each.
function NAdam.update(p, g, st, group, hy, d)
  if group.maximize then g = -g end
  local step = st.step
  step:add_(1)
  if group.weight_decay ~= 0 then
    if group.decoupled_weight_decay then p:mul_(d.decay) else g = g:add(p, hy.weight_decay) end
  end
  local mu = (1 - 0.5 * 0.96 ^ (step * hy.momentum_decay)) * hy.beta1
  local mu_next = (1 - 0.5 * 0.96 ^ ((step + 1) * hy.momentum_decay)) * hy.beta1
  local mu_product = st.mu_product
  mu_product:mul_(mu)
  local m, v = st.exp_avg, st.exp_avg_sq
  m:lerp_(g, d.one_minus_beta1)                           -- beta1 m + (1 - beta1) g
  v:mul_(hy.beta2):addcmul_(g, g, d.one_minus_beta2)      -- beta2 v + (1 - beta2) g^2
  local denom = v:div(1 - hy.beta2 ^ step):sqrt_():add_(hy.eps)
  p:addcdiv_(g, denom, d.neg_lr * (1 - mu) / (1 - mu_product))
  p:addcdiv_(m, denom, d.neg_lr * mu_next / (1 - mu_product * mu_next))
end

return { Adamax = Adamax, NAdam = NAdam }
