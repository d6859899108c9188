--- tide.optim.Adam and tide.optim.AdamW: Adam with bias correction, L2 weight
-- decay (Adam) or decoupled weight decay (AdamW), AMSGrad and maximize, as
-- torch.optim.Adam / AdamW compute them. The step count is a 0-d float64
-- tensor per parameter and the bias corrections are computed from it by engine
-- ops, so nothing that changes from step to step is a Lua number baked into an op.
local Optimizer = require "tide.optim.optimizer"

local checks = Optimizer.checks

local function check(group, bad)
  checks.at_least_zero(group, "lr", bad)
  checks.at_least_zero(group, "eps", bad)
  checks.betas(group, bad)
  checks.at_least_zero(group, "weight_decay", bad)
  checks.boolean(group, "amsgrad", bad)
  checks.boolean(group, "maximize", bad)
end

local hypers = {
  { "lr", function(g) return g.lr end },
  { "beta1", function(g) return g.betas[1] end },
  { "beta2", function(g) return g.betas[2] end },
  { "eps", function(g) return g.eps end },
  { "weight_decay", function(g) return g.weight_decay end },
}

local state_keys = { step = "step", exp_avg = "buffer", exp_avg_sq = "buffer", max_exp_avg_sq = "buffer" }

local function required_state(group)
  if group.amsgrad then return { "step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq" } end
  return { "step", "exp_avg", "exp_avg_sq" }
end

local function init_state(p, group)
  local zeros = Optimizer.zeros_like
  return {
    step = Optimizer.scalar_tensor(0, p:device()),
    exp_avg = zeros(p),
    exp_avg_sq = zeros(p),
    max_exp_avg_sq = group.amsgrad and zeros(p) or nil,
  }
end

local function derive(hy, group, decoupled)
  return {
    one_minus_beta1 = 1 - hy.beta1,
    one_minus_beta2 = 1 - hy.beta2,
    decay = decoupled and group.weight_decay ~= 0 and 1 - hy.lr * hy.weight_decay or nil,
  }
end

-- The update shared by Adam and AdamW (decoupled: the weight decay multiplies p).
-- Six passes over the parameter's memory (lerp_, mul_, addcmul_, sqrt, add_,
-- addcdiv_; one more for amsgrad, weight decay or maximize) and eight 0-d ops.
-- The published p - lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps) is computed as
-- p + lr sqrt(bc2) / (beta1^t - 1) * m / (sqrt(v) + eps sqrt(bc2)), the same
-- value (numerator and denominator multiplied by sqrt(bc2); beta1^t - 1 is
-- exactly -bc1), which scales the small factors instead of the whole of v.
local function update(p, g, st, group, hy, d, decoupled)
  if group.maximize then g = -g end
  local step = st.step
  step:add_(1)
  if group.weight_decay ~= 0 then
    if decoupled then p:mul_(d.decay) else g = g:add(p, hy.weight_decay) end
  end
  local m, v = st.exp_avg, st.exp_avg_sq
  m:lerp_(g, d.one_minus_beta1)                          -- beta1 m + (1 - beta1) g
  v:mul_(hy.beta2):addcmul_(g, g, d.one_minus_beta2)     -- beta2 v + (1 - beta2) g^2
  local bc2_sqrt = (1 - hy.beta2 ^ step):sqrt_()
  local neg_step_size = (hy.lr * bc2_sqrt):div_(hy.beta1 ^ step - 1)
  local denom
  if group.amsgrad then
    local vmax = st.max_exp_avg_sq
    if vmax == nil then   -- amsgrad switched on after the first step
      vmax = v:clone()
      st.max_exp_avg_sq = vmax
    else
      vmax:maximum_(v)
    end
    denom = vmax:sqrt()
  else
    denom = v:sqrt()
  end
  denom:add_(bc2_sqrt, hy.eps)                           -- sqrt(v) + eps sqrt(bc2)
  p:addcdiv_(m, denom, neg_step_size)
end

--- Adam(params, {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 0,
-- amsgrad = false, maximize = false}). Per step t (counted per parameter), with
-- gradient g: g = -g if maximize; g = g + weight_decay * p; m = beta1 m + (1 - beta1) g;
-- v = beta2 v + (1 - beta2) g^2; vmax = max(vmax, v) with amsgrad (used for v);
-- p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps).
-- @usage local opt = tide.optim.Adam(params, { lr = 1e-3, betas = { 0.9, 0.99 } })
local Adam = Optimizer.class("Adam", {
  defaults = { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0, amsgrad = false, maximize = false },
  hypers = hypers, state_keys = state_keys, required_state = required_state, init_state = init_state,
  check = check,
  derive = function(hy, group) return derive(hy, group, false) end,
  update = function(p, g, st, group, hy, d) return update(p, g, st, group, hy, d, false) end,
})

--- AdamW(params, {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 1e-2,
-- amsgrad = false, maximize = false}): Adam whose weight decay is decoupled from
-- the gradient: p = p * (1 - lr * weight_decay) before the Adam update.
-- @usage local opt = tide.optim.AdamW(params, { lr = 3e-4, weight_decay = 0.1 })
local AdamW = Optimizer.class("AdamW", {
  defaults = { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 1e-2, amsgrad = false,
               maximize = false },
  hypers = hypers, state_keys = state_keys, required_state = required_state, init_state = init_state,
  check = check,
  derive = function(hy, group) return derive(hy, group, true) end,
  update = function(p, g, st, group, hy, d) return update(p, g, st, group, hy, d, true) end,
})

return { Adam = Adam, AdamW = AdamW }
