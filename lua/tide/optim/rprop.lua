--- tide.optim.Rprop: resilient backpropagation (Riedmiller and Braun 1993),
-- as torch.optim.Rprop computes it: every element has its own step size,
-- grown while its gradient keeps its sign and shrunk when the sign flips; only
-- the gradient's sign moves the parameter. The sign tests are tide.where over
-- tensors, so no step reads a value to the host.
local Optimizer = require "tide.optim.optimizer"
local T = require "tide.tensor"

local checks, fmt, where = Optimizer.checks, Optimizer.fmt, T.functions.where

-- A table of two numbers, or nil after bad(msg).
local function pair(group, key, bad)
  local v = group[key]
  if type(v) ~= "table" or #v ~= 2 or type(v[1]) ~= "number" or type(v[2]) ~= "number" then
    bad(string.format("%s must be a table of two numbers, got %s", key,
      type(v) == "table" and string.format("a table of %d values", #v) or fmt(v)))
  end
  return v
end

--- Rprop(params, {lr = 1e-2, etas = {0.5, 1.2}, step_sizes = {1e-6, 50},
-- maximize = false}). Each element keeps a step size s (lr at first) and its
-- previous gradient g' (0 at first). Per step, with gradient g (-g if
-- maximize): s = s etaplus where g g' > 0, s etaminus where g g' < 0 (and
-- there g = 0: no move, and the next step starts afresh), else s; s is then
-- clamped to [min_step, max_step]; p = p - sign(g) s; g' = g.
-- @usage local opt = tide.optim.Rprop(params, { lr = 1e-2, etas = { 0.5, 1.2 } })
local Rprop = Optimizer.class("Rprop", {
  defaults = { lr = 1e-2, etas = { 0.5, 1.2 }, step_sizes = { 1e-6, 50 }, maximize = false },
  hypers = {
    { "lr", function(g) return g.lr end },
    { "etaminus", function(g) return g.etas[1] end },
    { "etaplus", function(g) return g.etas[2] end },
    { "min_step", function(g) return g.step_sizes[1] end },
    { "max_step", function(g) return g.step_sizes[2] end },
  },
  state_keys = { step = "step", prev = "buffer", step_size = "buffer" },
})

function Rprop.check(group, bad)
  checks.at_least_zero(group, "lr", bad)
  local etas = pair(group, "etas", bad)
  if not (etas[1] > 0 and etas[1] < 1 and etas[2] > 1) then
    bad(string.format("etas must satisfy 0 < etaminus < 1 < etaplus, got {%s, %s}", fmt(etas[1]), fmt(etas[2])))
  end
  local sizes = pair(group, "step_sizes", bad)
  if not (sizes[1] >= 0 and sizes[1] <= sizes[2]) then
    bad(string.format("step_sizes must satisfy 0 <= min <= max, got {%s, %s}", fmt(sizes[1]), fmt(sizes[2])))
  end
  checks.boolean(group, "maximize", bad)
end

function Rprop.required_state() return { "step", "prev", "step_size" } end

-- The step sizes start at the lr of the first step (PyTorch's rule): a later lr
-- changes nothing, as in PyTorch.
function Rprop.init_state(p, group)
  local step_size = Optimizer.zeros_like(p)
  step_size:fill_(group.lr)
  return { step = Optimizer.scalar_tensor(0, p:device()), prev = Optimizer.zeros_like(p), step_size = step_size }
end

function Rprop.derive() return {} end

-- Twelve passes over the parameter's memory (mul, gt, lt, two where for the
-- factor, mul_, maximum_ and minimum_ on the step size, where and sign on the
-- gradient, addcmul_, copy_); maximize adds one.
function Rprop.update(p, g, st, group, hy)
  if group.maximize then g = -g end
  st.step:add_(1)
  local prod = g * st.prev
  local grow, shrink = prod:gt(0), prod:lt(0)
  local factor = where(grow, hy.etaplus, where(shrink, hy.etaminus, 1))
  st.step_size:mul_(factor):maximum_(hy.min_step):minimum_(hy.max_step)
  g = where(shrink, 0, g)
  p:addcmul_(g:sign(), st.step_size, -1)
  st.prev:copy_(g)
end

return Rprop
