--- tide.optim.RMSprop: RMSprop with smoothing constant alpha, weight decay,
-- momentum, the centered variant (normalised by an estimate of the variance)
-- and maximize, as torch.optim.RMSprop computes it.
local Optimizer = require "tide.optim.optimizer"

local checks = Optimizer.checks

--- RMSprop(params, {lr = 1e-2, alpha = 0.99, eps = 1e-8, weight_decay = 0,
-- momentum = 0, centered = false, maximize = false}). Per step, with gradient g:
-- g = -g if maximize; g = g + weight_decay * p; v = alpha v + (1 - alpha) g^2;
-- centered: a = alpha a + (1 - alpha) g and s = sqrt(v - a^2) + eps, else
-- s = sqrt(v) + eps; with momentum b = momentum b + g / s and p = p - lr b,
-- else p = p - lr g / s.
-- @usage local opt = tide.optim.RMSprop(params, { lr = 1e-3, momentum = 0.9, centered = true })
local RMSprop = Optimizer.class("RMSprop", {
  defaults = { lr = 1e-2, alpha = 0.99, eps = 1e-8, weight_decay = 0, momentum = 0, centered = false,
               maximize = false },
  hypers = {
    { "lr", function(g) return g.lr end },
    { "alpha", function(g) return g.alpha end },
    { "eps", function(g) return g.eps end },
    { "weight_decay", function(g) return g.weight_decay end },
    { "momentum", function(g) return g.momentum end },
  },
  state_keys = { step = "step", square_avg = "buffer", momentum_buffer = "buffer", grad_avg = "buffer" },
})

function RMSprop.check(group, bad)
  checks.at_least_zero(group, "lr", bad)
  checks.at_least_zero(group, "alpha", bad)
  checks.at_least_zero(group, "eps", bad)
  checks.at_least_zero(group, "weight_decay", bad)
  checks.at_least_zero(group, "momentum", bad)
  checks.boolean(group, "centered", bad)
  checks.boolean(group, "maximize", bad)
end

function RMSprop.required_state(group)
  local r = { "step", "square_avg" }
  if group.momentum > 0 then r[#r + 1] = "momentum_buffer" end
  if group.centered then r[#r + 1] = "grad_avg" end
  return r
end

function RMSprop.init_state(p, group)
  local zeros = Optimizer.zeros_like
  return {
    step = Optimizer.scalar_tensor(0, p:device()),
    square_avg = zeros(p),
    momentum_buffer = group.momentum > 0 and zeros(p) or nil,
    grad_avg = group.centered and zeros(p) or nil,
  }
end

function RMSprop.derive(hy)
  return { one_minus_alpha = 1 - hy.alpha, neg_lr = -hy.lr }
end

-- Five passes over the parameter's memory (mul_, addcmul_, sqrt, add_, addcdiv_);
-- momentum makes the last one three (the buffer's mul_ and addcdiv_, then p's add_),
-- centered adds two (lerp_, and addcmul before the sqrt), weight decay and maximize one each.
function RMSprop.update(p, g, st, group, hy, d)
  if group.maximize then g = -g end
  st.step:add_(1)
  if group.weight_decay ~= 0 then g = g:add(p, hy.weight_decay) end
  local sq = st.square_avg
  sq:mul_(hy.alpha):addcmul_(g, g, d.one_minus_alpha)    -- alpha v + (1 - alpha) g^2
  local avg
  if group.centered then
    local ga = st.grad_avg
    if ga == nil then   -- centered switched on after the first step
      ga = Optimizer.zeros_like(p)
      st.grad_avg = ga
    end
    ga:lerp_(g, d.one_minus_alpha)                       -- alpha a + (1 - alpha) g
    avg = sq:addcmul(ga, ga, -1):sqrt_()                 -- sqrt(v - a^2)
  else
    avg = sq:sqrt()
  end
  avg:add_(hy.eps)
  if group.momentum > 0 then
    local buf = st.momentum_buffer
    if buf == nil then   -- momentum switched on after the first step (a OneCycle schedule does so)
      buf = Optimizer.zeros_like(p)
      st.momentum_buffer = buf
    end
    buf:mul_(hy.momentum):addcdiv_(g, avg)               -- momentum b + g / avg
    p:add_(buf, d.neg_lr)
  else
    p:addcdiv_(g, avg, d.neg_lr)
  end
end

return RMSprop
