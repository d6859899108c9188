--- tide.optim.SGD: stochastic gradient descent with momentum, dampening,
-- Nesterov momentum, weight decay (L2) and maximize, as torch.optim.SGD
-- computes it (its documented algorithm; the momentum buffer of the first step
-- is the gradient itself). Groups, state dicts and stepping are Optimizer's.
local Optimizer = require "tide.optim.optimizer"

local number, boolean, at_least_zero = Optimizer.checks.number, Optimizer.checks.boolean,
  Optimizer.checks.at_least_zero

--- SGD(params, {lr = 1e-3, momentum = 0, dampening = 0, weight_decay = 0,
-- nesterov = false, maximize = false}). Per step, for each parameter p with
-- gradient g: g = -g if maximize; g = g + weight_decay * p; with momentum,
-- b = g on the first step, else b = momentum * b + (1 - dampening) * g, and
-- g = g + momentum * b (nesterov) or g = b; then p = p - lr * g.
-- @usage local opt = tide.optim.SGD(params, { lr = 0.1, momentum = 0.9, nesterov = true })
local SGD = Optimizer.class("SGD", {
  defaults = { lr = 1e-3, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false, maximize = false },
  hypers = {
    { "lr", function(g) return g.lr end },
    { "momentum", function(g) return g.momentum end },
    { "dampening", function(g) return g.dampening end },
    { "weight_decay", function(g) return g.weight_decay end },
  },
  state_keys = { momentum_buffer = "buffer" },
})

function SGD.check(group, bad)
  at_least_zero(group, "lr", bad)
  at_least_zero(group, "momentum", bad)
  number(group, "dampening", bad)
  at_least_zero(group, "weight_decay", bad)
  boolean(group, "maximize", bad)
  if boolean(group, "nesterov", bad) and (group.momentum <= 0 or group.dampening ~= 0) then
    bad("nesterov requires momentum > 0 and dampening = 0")
  end
end

function SGD.required_state() return {} end

function SGD.init_state() return {} end

function SGD.derive(hy, group)
  return { neg_lr = -hy.lr, keep = group.momentum ~= 0 and 1 - hy.dampening or nil }
end

-- One pass over the parameter (p + neg_lr g), three with momentum (the buffer's
-- mul_ and add_, then p's), four with Nesterov; weight decay and maximize add one each.
function SGD.update(p, g, st, group, hy, d)
  if group.maximize then g = -g end
  if group.weight_decay ~= 0 then g = g:add(p, hy.weight_decay) end
  if group.momentum ~= 0 then
    local buf = st.momentum_buffer
    if buf == nil then
      buf = g:clone()
      st.momentum_buffer = buf
    else
      buf:mul_(hy.momentum):add_(g, d.keep)
    end
    if group.nesterov then g = g:add(buf, hy.momentum) else g = buf end
  end
  p:add_(g, d.neg_lr)
end

return SGD
