--- tide.optim.LBFGS: limited-memory BFGS, as torch.optim.LBFGS computes it:
-- step(closure) runs up to max_iter quasi-Newton iterations on the flattened
-- parameter vector, with a fixed step or a strong-Wolfe line search (cubic
-- interpolation, Nocedal and Wright's Algorithms 3.5 and 3.6). Unlike the
-- other optimizers it reads scalars to the host on every iteration (the loss,
-- g.d, y.s, the largest gradient element: its stopping tests and the line
-- search branch on them, as PyTorch's .item() calls do), so a step cannot be
-- captured by tide.jit.compile. The two-loop recursion stays in engine ops.
local Optimizer = require "tide.optim.optimizer"
local B = require "bindings.ffi"
local T = require "tide.tensor"
local autograd = require "tide.autograd"

local checks, fmt, fail = Optimizer.checks, Optimizer.fmt, B.fail
local functions, is_tensor = T.functions, T.is_tensor

-- the strong Wolfe constants (sufficient decrease, curvature) and the
-- evaluations one line search may make, PyTorch's values
local C1, C2, MAX_LS = 1e-4, 0.9, 25

-- -- options ------------------------------------------------------------------------------

local function positive_integer(group, key, bad)
  local v = group[key]
  if type(v) ~= "number" or v < 1 or v ~= math.floor(v) then
    bad(string.format("%s must be a positive integer, got %s", key, fmt(v)))
  end
end

local function check(group, bad)
  checks.at_least_zero(group, "lr", bad)
  positive_integer(group, "max_iter", bad)
  positive_integer(group, "max_eval", bad)
  checks.at_least_zero(group, "tolerance_grad", bad)
  checks.at_least_zero(group, "tolerance_change", bad)
  positive_integer(group, "history_size", bad)
  local ls = group.line_search_fn
  if ls ~= false and ls ~= "strong_wolfe" then
    bad(string.format("line_search_fn must be nil or 'strong_wolfe', got %s", fmt(ls)))
  end
end

--- LBFGS(params, {lr = 1, max_iter = 20, max_eval = max_iter * 1.25 (rounded down),
-- tolerance_grad = 1e-7, tolerance_change = 1e-9, history_size = 100,
-- line_search_fn = nil or "strong_wolfe"}). One param group only, its
-- parameters of one dtype and device (PyTorch's restriction: the step works on
-- them as one vector). opt:step(closure): closure re-evaluates the model,
-- calls zero_grad() and backward() itself and returns the loss (a tensor or a
-- number); step may call it several times, and returns the loss of its first call.
-- Each iteration moves the parameters along d (the steepest descent -g at
-- first, then the L-BFGS direction from the last history_size pairs of steps
-- and gradient changes) by t: lr, but min(1, 1 / |g|_1) lr on the first
-- iteration ever, or what the line search accepts. It stops after max_iter
-- iterations or max_eval closure calls, when max |g| <= tolerance_grad, or
-- when the step (max |t d|) or the change of the loss falls below tolerance_change.
-- @usage
--   local opt = tide.optim.LBFGS(model:parameters(), { line_search_fn = "strong_wolfe" })
--   opt:step(function() opt:zero_grad(); local l = loss_fn(); l:backward(); return l end)
local LBFGS = Optimizer.class("LBFGS", {
  defaults = { lr = 1, max_iter = 20, max_eval = 25, tolerance_grad = 1e-7, tolerance_change = 1e-9,
               history_size = 100, line_search_fn = false },
  hypers = {},
  check = check,
})

-- max_eval's default depends on max_iter; line_search_fn's is nil, stored as false.
function LBFGS.new(params, opts)
  if type(opts) == "table" then
    local o = {}
    for k, v in pairs(opts) do o[k] = v end
    if o.max_eval == nil and type(o.max_iter) == "number" then o.max_eval = math.floor(o.max_iter * 5 / 4) end
    opts = o
  end
  local self = Optimizer.init(setmetatable({}, LBFGS), params, opts)
  if #self.param_groups ~= 1 then
    fail(string.format("LBFGS: supports one param group only, got %d", #self.param_groups))
  end
  local ps = self.param_groups[1].params
  for i = 2, #ps do
    if ps[i]:dtype() ~= ps[1]:dtype() or ps[i]:device() ~= ps[1]:device() then
      fail(string.format("LBFGS: all parameters must have one dtype and device: parameter 1 is %s on %s, " ..
        "parameter %d %s on %s", ps[1]:dtype(), ps[1]:device(), i, ps[i]:dtype(), ps[i]:device()))
    end
  end
  return self
end

function LBFGS:add_param_group()
  fail("LBFGS: add_param_group: LBFGS supports one param group only")
end

-- -- the flat vector ------------------------------------------------------------------------

local function numel_of(params)
  local n = 0
  for _, p in ipairs(params) do n = n + p:numel() end
  return n
end

-- The gradients of params as one new vector (zeros where a grad is nil).
local function flat_grad(params)
  local parts = {}
  for i, p in ipairs(params) do
    local g = p.grad
    parts[i] = g == nil and Optimizer.zeros_like(p):reshape(-1) or g:reshape(-1)
  end
  return functions.cat(parts, 1)   -- a new tensor even of one part: a later backward may write into p.grad
end

-- params += t * d, d being the flat vector
local function add_flat(params, t, d)
  local offset = 1
  for _, p in ipairs(params) do
    local n = p:numel()
    if n > 0 then p:add_(d:narrow(1, offset, n):view_as(p), t) end
    offset = offset + n
  end
end

local function max_abs(v) return v:numel() == 0 and 0 or v:abs():max():item() end

local function dot(a, b) return functions.dot(a, b) end

-- -- the line search ----------------------------------------------------------------------

-- The minimiser of the cubic through (a0, f0) and (a1, f1) with slopes d0 and
-- d1 (Nocedal and Wright, eq. 3.59), or nil where the cubic has none.
local function cubic_min(a0, f0, d0, a1, f1, d1)
  local e = d0 + d1 - 3 * (f0 - f1) / (a0 - a1)
  local r = e * e - d0 * d1
  if not (r >= 0) then return nil end
  local s = math.sqrt(r)
  if a1 < a0 then s = -s end
  local den = d1 - d0 + 2 * s
  local a = a1 - (a1 - a0) * (d1 + s - e) / den
  if a ~= a or a == math.huge or a == -math.huge then return nil end
  return a
end

-- Where to try next between points a and b (tables {a, f, gd}): the cubic's
-- minimiser kept off the ends by a tenth of the interval, else the midpoint.
local function interpolate(a, b)
  local lo, hi = math.min(a.a, b.a), math.max(a.a, b.a)
  local margin = 0.1 * (hi - lo)
  local x = cubic_min(a.a, a.f, a.gd, b.a, b.f, b.gd)
  if x == nil then return (lo + hi) / 2 end
  return math.max(lo + margin, math.min(hi - margin, x))
end

-- A step length along d that satisfies the strong Wolfe conditions
--   f(a) <= f(0) + C1 a f'(0)   and   |f'(a)| <= C2 |f'(0)|
-- (Nocedal and Wright, Algorithm 3.5: grow the step until an interval holds
-- such a point; Algorithm 3.6, zoom: shrink the interval). eval(a) returns the
-- loss and the flat gradient at x + a d. Gives up after MAX_LS evaluations, or
-- once the interval is shorter than tol_change along d, with the best point
-- that decreased the loss enough (possibly a = 0). Returns that point
-- {a, f, g, gd} and the number of evaluations.
local function strong_wolfe(eval, a1, d, f0, g0, gd0, tol_change)
  local evals = 0
  local function at(a)
    evals = evals + 1
    local f, g = eval(a)
    return { a = a, f = f, g = g, gd = dot(g, d):item() }
  end
  local function too_high(pt) return pt.f > f0 + C1 * pt.a * gd0 end
  local function flat_enough(pt) return math.abs(pt.gd) <= -C2 * gd0 end
  local d_size = max_abs(d)

  -- zoom: lo satisfies sufficient decrease with the lowest loss so far, and the
  -- interval between lo and hi holds a point that satisfies both conditions
  local function zoom(lo, hi)
    while evals < MAX_LS and math.abs(hi.a - lo.a) * d_size >= tol_change do
      local pt = at(interpolate(lo, hi))
      if too_high(pt) or pt.f >= lo.f then
        hi = pt
      else
        if flat_enough(pt) then return pt end
        if pt.gd * (hi.a - lo.a) >= 0 then hi = lo end
        lo = pt
      end
    end
    return lo
  end

  local prev, cur = { a = 0, f = f0, g = g0, gd = gd0 }, at(a1)
  while true do
    if too_high(cur) or (prev.a > 0 and cur.f >= prev.f) then return zoom(prev, cur), evals end
    if flat_enough(cur) then return cur, evals end
    if cur.gd >= 0 then return zoom(cur, prev), evals end
    if evals >= MAX_LS then return cur, evals end
    -- still going down: extrapolate, at least doubling the step and at most
    -- growing it tenfold, from the cubic through the last two points
    local width = cur.a - prev.a
    local x = cubic_min(prev.a, prev.f, prev.gd, cur.a, cur.f, cur.gd)
    x = math.max(cur.a + width, math.min(cur.a + 10 * width, x or cur.a + width))
    prev, cur = cur, at(x)
  end
end

-- -- the step ------------------------------------------------------------------------------

-- The loss closure returned, as a number.
local function loss_value(loss)
  if is_tensor(loss) and loss:numel() == 1 then return loss:item() end
  if type(loss) == "number" then return loss end
  fail(string.format("LBFGS: step: the closure must return the loss (a one-element tensor or a number), got %s",
    is_tensor(loss) and string.format("a tensor of %d elements", loss:numel()) or type(loss)))
end

-- The L-BFGS direction -H g, H the inverse Hessian estimate from the pairs
-- (s_i, y_i) with rho_i = 1 / y_i.s_i and the scaling h_diag (the two-loop
-- recursion, Nocedal and Wright, Algorithm 7.4). All engine ops: no host reads.
local function direction(g, st)
  local dirs, stps, ro = st.old_dirs, st.old_stps, st.ro
  local k = #dirs
  local al = {}
  local q = -g
  for i = k, 1, -1 do
    al[i] = dot(stps[i], q) * ro[i]
    q:sub_(dirs[i], al[i])
  end
  local r = q:mul_(st.H_diag)
  for i = 1, k do
    local be = dot(dirs[i], r) * ro[i]
    r:add_(stps[i], al[i] - be)
  end
  return r
end

-- Takes the pair (s, y) = (the last step, the change of the gradient) into
-- the history where y.s > 1e-10 (so that H stays positive definite), dropping
-- the oldest beyond history pairs.
local function remember(st, s, y, history)
  local ys = dot(y, s)
  if ys:item() <= 1e-10 then return end
  if #st.old_dirs == history then
    table.remove(st.old_dirs, 1); table.remove(st.old_stps, 1); table.remove(st.ro, 1)
  end
  table.insert(st.old_dirs, y); table.insert(st.old_stps, s); table.insert(st.ro, 1 / ys)
  st.H_diag = ys / dot(y, y)
end

-- Moves params to x + t d with t from the line search (first trial t); returns
-- t, the loss and the flat gradient there, and the closure calls it made.
local function search(params, evaluate, d, t, loss, g, gd, tol_change)
  local x0 = {}
  for i, p in ipairs(params) do x0[i] = p:clone() end
  local pt, evals = strong_wolfe(function(a)
    add_flat(params, a, d)
    local f, fg = evaluate()
    for i, p in ipairs(params) do p:copy_(x0[i]) end
    return f, fg
  end, t, d, loss, g, gd, tol_change)
  add_flat(params, pt.a, d)
  return pt.a, pt.f, pt.g, evals
end

-- Runs the iterations of one step(closure), with gradient recording off.
local function run(self, closure, orig_loss)
  local group = self.param_groups[1]
  local params = group.params
  local lr, max_iter, max_eval = group.lr, group.max_iter, group.max_eval
  local tol_grad, tol_change = group.tolerance_grad, group.tolerance_change
  local st = self.state[params[1]]
  if st == nil then
    st = { func_evals = 0, n_iter = 0 }
    self.state[params[1]] = st
  end
  local function evaluate() return loss_value(autograd.enable_grad(closure)), flat_grad(params) end

  local loss, g = loss_value(orig_loss), flat_grad(params)
  st.func_evals = st.func_evals + 1
  if max_abs(g) <= tol_grad then return end
  local evals, iter = 1, 0
  local d, t = st.d, st.t
  while iter < max_iter do
    iter = iter + 1
    st.n_iter = st.n_iter + 1
    if st.n_iter == 1 then
      d = -g
      st.old_dirs, st.old_stps, st.ro, st.H_diag = {}, {}, {}, 1
    else
      remember(st, d * t, g - st.prev_flat_grad, group.history_size)
      d = direction(g, st)
    end
    st.prev_flat_grad, st.prev_loss = g, loss
    t = st.n_iter == 1 and math.min(1, 1 / g:abs():sum():item()) * lr or lr
    local gd = dot(g, d):item()
    if gd > -tol_change then break end   -- not a descent direction
    local more = 0
    if group.line_search_fn == "strong_wolfe" then
      t, loss, g, more = search(params, evaluate, d, t, loss, g, gd, tol_change)
    else
      add_flat(params, t, d)
      if iter ~= max_iter then
        loss, g = evaluate()
        more = 1
      end
    end
    evals = evals + more
    st.func_evals = st.func_evals + more
    if iter == max_iter or evals >= max_eval or max_abs(g) <= tol_grad then break end
    if max_abs(d) * math.abs(t) <= tol_change or math.abs(loss - st.prev_loss) < tol_change then break end
  end
  st.d, st.t = d, t
end

--- Runs up to max_iter iterations, calling closure to re-evaluate the loss and
-- its gradients (with gradient recording on).
-- @param closure function that zeroes the gradients, computes the loss, calls backward and returns the loss
-- @return the loss closure returned on its first call
-- @usage opt:step(function() opt:zero_grad(); local l = loss_fn(); l:backward(); return l end)
function LBFGS:step(closure)
  if type(closure) ~= "function" then
    fail(string.format("LBFGS: step: needs a closure that re-evaluates the loss (zero_grad, forward, backward, " ..
      "return the loss), got %s", type(closure)))
  end
  local orig_loss = autograd.enable_grad(closure)
  autograd.no_grad(run, self, closure, orig_loss)
  return orig_loss
end

-- -- state dicts ------------------------------------------------------------------------------

-- The state of the first parameter, PyTorch's names: counters and numbers, the
-- flat vectors d and prev_flat_grad, the lists old_dirs, old_stps (vectors)
-- and ro, and H_diag (0-d tensors, or the number 1 before the first pair).
local numbers = { func_evals = true, n_iter = true, t = true, prev_loss = true }
local vectors = { d = true, prev_flat_grad = true }
local lists = { old_dirs = "vector", old_stps = "vector", ro = "scalar" }

-- A copy of state st, its tensors passed through convert(v, kind), kind
-- "vector" or "scalar".
local function copy_state(st, convert)
  local r = {}
  for k, v in pairs(st) do
    if lists[k] then
      r[k] = {}
      for i, x in ipairs(v) do r[k][i] = convert(x, lists[k]) end
    elseif is_tensor(v) then
      r[k] = convert(v, vectors[k] and "vector" or "scalar")
    else
      r[k] = v
    end
  end
  return r
end

--- A snapshot of the optimizer, as Optimizer.state_dict; the state (of
-- parameter 1) holds PyTorch's keys, its tensors copied.
-- @return the state dict
-- @usage local sd = opt:state_dict()
function LBFGS:state_dict()
  local sd = Optimizer.state_dict(self)
  if sd.state[1] then sd.state[1] = copy_state(self.state[self.param_groups[1].params[1]], T.methods.clone) end
  return sd
end

--- Loads a state dict made by LBFGS's state_dict() over parameters of the same
-- sizes; everything is checked before anything changes.
-- @param sd the state dict
-- @usage opt:load_state_dict(saved)
function LBFGS:load_state_dict(sd)
  local function bad(msg, ...) fail(string.format("LBFGS: load_state_dict: " .. msg, ...)) end
  if type(sd) ~= "table" or type(sd.state) ~= "table" or type(sd.param_groups) ~= "table" then
    bad("expects a table with the tables 'state' and 'param_groups', got %s",
      type(sd) == "table" and "a table without them" or type(sd))
  end
  local params = self.param_groups[1].params
  local n = numel_of(params)
  local function vector(v, what)
    if not is_tensor(v) or v:dim() ~= 1 or v:numel() ~= n then
      bad("%s must be a vector of %d elements (the parameters' count), got %s", what, n,
        is_tensor(v) and "shape [" .. table.concat(v:shape(), ",") .. "]" or type(v))
    end
  end
  local function scalar(v, what)
    if not (type(v) == "number" or (is_tensor(v) and v:numel() == 1)) then
      bad("%s must be a number or a one-element tensor, got %s", what, is_tensor(v) and "a tensor of " ..
        v:numel() .. " elements" or type(v))
    end
  end
  for k, st in pairs(sd.state) do
    if k ~= 1 then bad("state for parameter %s; LBFGS keeps its state on parameter 1", fmt(k)) end
    if type(st) ~= "table" then bad("the state of parameter 1 must be a table, got %s", type(st)) end
    for key, v in pairs(st) do
      if numbers[key] then
        if type(v) ~= "number" then bad("%s must be a number, got %s", key, fmt(v)) end
      elseif vectors[key] then
        vector(v, key)
      elseif lists[key] then
        if type(v) ~= "table" then bad("%s must be a table, got %s", key, type(v)) end
        for i, x in ipairs(v) do
          if lists[key] == "vector" then vector(x, key .. "[" .. i .. "]") else scalar(x, key .. "[" .. i .. "]") end
        end
      elseif key == "H_diag" then
        scalar(v, key)
      else
        bad("unknown state %s", fmt(key))
      end
    end
    for _, key in ipairs { "func_evals", "n_iter" } do
      if st[key] == nil then bad("the state of parameter 1 lacks %s", key) end
    end
    if st.n_iter > 0 then
      for _, key in ipairs { "d", "t", "old_dirs", "old_stps", "ro", "H_diag", "prev_flat_grad", "prev_loss" } do
        if st[key] == nil then bad("the state of parameter 1 lacks %s", key) end
      end
      if #st.old_dirs ~= #st.ro or #st.old_stps ~= #st.ro then
        bad("old_dirs, old_stps and ro must have one length, got %d, %d and %d", #st.old_dirs, #st.old_stps, #st.ro)
      end
    end
  end
  -- the groups, by the base (which checks them, then empties the state)
  Optimizer.load_state_dict(self, { state = {}, param_groups = sd.param_groups })
  local st = sd.state[1]
  if st ~= nil then
    local p = params[1]
    local dtype, dev = p:dtype(), p:device()
    self.state[p] = copy_state(st, function(v, kind)
      if type(v) == "number" then return v end
      if kind == "scalar" then v = v:reshape({}) end
      local c = v:to(dtype, dev)
      return c == v and v:clone() or c
    end)
  end
end

return LBFGS
