--- tide.optim.ASGD: averaged stochastic gradient descent (Polyak and Juditsky
-- 1992, with Bottou's decaying step sizes), as torch.optim.ASGD computes it.
-- The step size eta and the averaging weight mu are 0-d float64 tensors per
-- parameter, computed from the step count by engine ops (PyTorch's capturable
-- form), so no step reads a value to the host.
local Optimizer = require "tide.optim.optimizer"

local checks = Optimizer.checks

--- ASGD(params, {lr = 1e-2, lambd = 1e-4, alpha = 0.75, t0 = 1e6, weight_decay = 0,
-- maximize = false}). State per parameter: step t, eta (lr at first), mu (1 at
-- first) and the average ax. Per step, with gradient g: g = -g if maximize;
-- g = g + weight_decay p; p = p (1 - lambd eta) - eta g; ax = ax + mu (p - ax);
-- then eta = lr / (1 + lambd lr t)^alpha and mu = 1 / max(1, t - t0). The
-- averaged parameters are in opt.state[p].ax.
-- @usage local opt = tide.optim.ASGD(params, { lr = 1e-2, t0 = 100 })
local ASGD = Optimizer.class("ASGD", {
  defaults = { lr = 1e-2, lambd = 1e-4, alpha = 0.75, t0 = 1e6, weight_decay = 0, maximize = false },
  hypers = {
    { "lr", function(g) return g.lr end },
    { "lambd", function(g) return g.lambd end },
    { "alpha", function(g) return g.alpha end },
    { "t0", function(g) return g.t0 end },
    { "weight_decay", function(g) return g.weight_decay end },
  },
  state_keys = { step = "step", eta = "step", mu = "step", ax = "buffer" },
})

function ASGD.check(group, bad)
  checks.at_least_zero(group, "lr", bad)
  checks.at_least_zero(group, "lambd", bad)
  checks.number(group, "alpha", bad)
  checks.number(group, "t0", bad)
  checks.at_least_zero(group, "weight_decay", bad)
  checks.boolean(group, "maximize", bad)
end

function ASGD.required_state() return { "step", "eta", "mu", "ax" } end

-- eta starts at the lr of the first step, as in PyTorch.
function ASGD.init_state(p, group)
  local dev = p:device()
  return { step = Optimizer.scalar_tensor(0, dev), eta = Optimizer.scalar_tensor(group.lr, dev),
           mu = Optimizer.scalar_tensor(1, dev), ax = Optimizer.zeros_like(p) }
end

function ASGD.derive(hy) return { lambd_lr = hy.lambd * hy.lr } end

-- Three passes over the parameter's memory (mul_, add_ and the average's
-- lerp_); weight decay and maximize add one each.
function ASGD.update(p, g, st, group, hy, d)
  if group.maximize then g = -g end
  local step, eta, mu = st.step, st.eta, st.mu
  step:add_(1)
  if group.weight_decay ~= 0 then g = g:add(p, hy.weight_decay) end
  p:mul_(1 - hy.lambd * eta):add_(g, -eta)
  st.ax:lerp_(p, mu)                                       -- ax + mu (p - ax)
  eta:copy_(hy.lr / (1 + d.lambd_lr * step) ^ hy.alpha)
  mu:copy_(1 / (step - hy.t0):clamp_(1))
end

return ASGD
