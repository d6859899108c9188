--- tide.optim.Adadelta: Adadelta (an lr-free adaptive method: the step is
-- scaled by the ratio of running RMS of past updates and of gradients), with
-- weight decay (L2) and maximize, as torch.optim.Adadelta computes it.
local Optimizer = require "tide.optim.optimizer"

local checks, fmt = Optimizer.checks, Optimizer.fmt

--- Adadelta(params, {lr = 1, rho = 0.9, eps = 1e-6, weight_decay = 0,
-- maximize = false}). Per step, with gradient g: g = -g if maximize;
-- g = g + weight_decay * p; v = rho v + (1 - rho) g^2;
-- delta = sqrt(u + eps) / sqrt(v + eps) * g; u = rho u + (1 - rho) delta^2;
-- p = p - lr * delta (v: square_avg, u: acc_delta, both starting at 0).
-- @usage local opt = tide.optim.Adadelta(params, { rho = 0.95 })
local Adadelta = Optimizer.class("Adadelta", {
  defaults = { lr = 1, rho = 0.9, eps = 1e-6, weight_decay = 0, maximize = false },
  hypers = {
    { "lr", function(g) return g.lr end },
    { "rho", function(g) return g.rho end },
    { "eps", function(g) return g.eps end },
    { "weight_decay", function(g) return g.weight_decay end },
  },
  state_keys = { step = "step", square_avg = "buffer", acc_delta = "buffer" },
})

function Adadelta.check(group, bad)
  checks.at_least_zero(group, "lr", bad)
  local rho = checks.number(group, "rho", bad)
  if not (rho >= 0 and rho <= 1) then bad(string.format("rho must be in [0, 1], got %s", fmt(rho))) end
  checks.at_least_zero(group, "eps", bad)
  checks.at_least_zero(group, "weight_decay", bad)
  checks.boolean(group, "maximize", bad)
end

function Adadelta.required_state() return { "step", "square_avg", "acc_delta" } end

function Adadelta.init_state(p)
  local zeros = Optimizer.zeros_like
  return { step = Optimizer.scalar_tensor(0, p:device()), square_avg = zeros(p), acc_delta = zeros(p) }
end

function Adadelta.derive(hy)
  return { one_minus_rho = 1 - hy.rho, neg_lr = -hy.lr }
end

-- Ten passes over the parameter's memory (two for v, two for each sqrt(x + eps),
-- div_ and mul_ for delta, two for u, add_ for p); weight decay and maximize add one each.
function Adadelta.update(p, g, st, group, hy, d)
  if group.maximize then g = -g end
  st.step:add_(1)
  if group.weight_decay ~= 0 then g = g:add(p, hy.weight_decay) end
  local v, u = st.square_avg, st.acc_delta
  v:mul_(hy.rho):addcmul_(g, g, d.one_minus_rho)         -- rho v + (1 - rho) g^2
  local std = v:add(hy.eps):sqrt_()
  local delta = u:add(hy.eps):sqrt_():div_(std):mul_(g)  -- sqrt(u + eps) / sqrt(v + eps) * g
  u:mul_(hy.rho):addcmul_(delta, delta, d.one_minus_rho)  -- rho u + (1 - rho) delta^2
  p:add_(delta, d.neg_lr)
end

return Adadelta
