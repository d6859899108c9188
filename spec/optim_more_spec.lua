-- optim, the optimizers a PyTorch or Torch7 user looks for next: RAdam, Rprop
-- and ASGD against their published update rules computed here in plain Lua
-- float64 (each option, float32 too), state dict round trips, compiled steps
-- equal to eager ones, the same steps on a CUDA device; LBFGS against a plain
-- Lua L-BFGS, on the Rosenbrock function, its strong-Wolfe line search on a
-- quadratic, its state dict; every error message.
local tide = require "tide"
local H = require "spec.helpers"
local C = require "spec.helpers.cuda_compare"
local O = require "spec.helpers.optim"

local optim = tide.optim

-- -- references ----------------------------------------------------------------------------

-- The published update rules, one element at a time, in float64. p, g: arrays
-- of numbers; st: the parameter's state (arrays and counters); o: the group's options.
local ref = {}

function ref.RAdam(p, g, st, o)
  local lr, eps, wd = o.lr or 1e-3, o.eps or 1e-8, o.weight_decay or 0
  local b1, b2 = o.betas and o.betas[1] or 0.9, o.betas and o.betas[2] or 0.999
  st.t = (st.t or 0) + 1
  local t = st.t
  st.m, st.v = st.m or {}, st.v or {}
  local bc1, bc2 = 1 - b1 ^ t, 1 - b2 ^ t
  local rho_inf = 2 / (1 - b2) - 1
  local rho_t = rho_inf - 2 * t * b2 ^ t / bc2
  for i = 1, #p do
    local gi = g[i]
    if o.maximize then gi = -gi end
    if o.decoupled_weight_decay then p[i] = p[i] * (1 - lr * wd) else gi = gi + wd * p[i] end
    st.m[i] = b1 * (st.m[i] or 0) + (1 - b1) * gi
    st.v[i] = b2 * (st.v[i] or 0) + (1 - b2) * gi * gi
    local m_hat = st.m[i] / bc1
    if rho_t > 5 then
      local r = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
      p[i] = p[i] - lr * m_hat * r * math.sqrt(bc2) / (math.sqrt(st.v[i]) + eps)
    else
      p[i] = p[i] - lr * m_hat
    end
  end
end

function ref.Rprop(p, g, st, o)
  local lr = o.lr or 1e-2
  local eta_minus, eta_plus = o.etas and o.etas[1] or 0.5, o.etas and o.etas[2] or 1.2
  local s_min, s_max = o.step_sizes and o.step_sizes[1] or 1e-6, o.step_sizes and o.step_sizes[2] or 50
  st.prev, st.size = st.prev or {}, st.size or {}
  for i = 1, #p do
    local gi = g[i]
    if o.maximize then gi = -gi end
    local prev, size = st.prev[i] or 0, st.size[i] or lr
    local sign = gi * prev
    if sign > 0 then size = size * eta_plus elseif sign < 0 then size = size * eta_minus end
    size = math.min(s_max, math.max(s_min, size))
    if sign < 0 then gi = 0 end
    local sg = gi > 0 and 1 or gi < 0 and -1 or 0
    p[i] = p[i] - sg * size
    st.prev[i], st.size[i] = gi, size
  end
end

function ref.ASGD(p, g, st, o)
  local lr, lambd, alpha, t0 = o.lr or 1e-2, o.lambd or 1e-4, o.alpha or 0.75, o.t0 or 1e6
  st.t = (st.t or 0) + 1
  st.eta, st.mu, st.ax = st.eta or lr, st.mu or 1, st.ax or {}
  for i = 1, #p do
    local gi = g[i]
    if o.maximize then gi = -gi end
    gi = gi + (o.weight_decay or 0) * p[i]
    p[i] = p[i] * (1 - lambd * st.eta) - st.eta * gi
    if st.mu == 1 then st.ax[i] = p[i] else st.ax[i] = (st.ax[i] or 0) + st.mu * (p[i] - (st.ax[i] or 0)) end
  end
  st.eta = lr / (1 + lambd * lr * st.t) ^ alpha
  st.mu = 1 / math.max(1, st.t - t0)
end

local function dot(a, b)
  local s = 0
  for i = 1, #a do s = s + a[i] * b[i] end
  return s
end

local function max_abs(a)
  local m = 0
  for i = 1, #a do m = math.max(m, math.abs(a[i])) end
  return m
end

-- One LBFGS step(closure) without a line search, as the algorithm is
-- published (Nocedal and Wright, Algorithm 7.5 with the two-loop recursion
-- 7.4, gamma = s.y / y.y) and with PyTorch's schedule: the first iteration
-- ever steps min(1, 1 / |g|_1) lr, later ones lr; a pair is kept when
-- y.s > 1e-10; the stopping tests of torch.optim.LBFGS. x: array; fg(x)
-- returns the loss and the gradient (an array); st persists across steps.
function ref.LBFGS(x, fg, st, o)
  local lr, max_iter = o.lr or 1, o.max_iter or 20
  local max_eval = o.max_eval or math.floor(max_iter * 5 / 4)
  local tol_grad, tol_change, history = o.tolerance_grad or 1e-7, o.tolerance_change or 1e-9, o.history_size or 100
  local n = #x
  local f, g = fg(x)
  if max_abs(g) <= tol_grad then return end
  st.k = st.k or 0
  local evals, iter = 1, 0
  local d, t = st.d, st.t
  while iter < max_iter do
    iter = iter + 1
    st.k = st.k + 1
    if st.k == 1 then
      d = {}
      for i = 1, n do d[i] = -g[i] end
      st.S, st.Y, st.gamma = {}, {}, 1
    else
      local s, y = {}, {}
      for i = 1, n do s[i], y[i] = d[i] * t, g[i] - st.g_prev[i] end
      if dot(y, s) > 1e-10 then
        if #st.S == history then table.remove(st.S, 1); table.remove(st.Y, 1) end
        st.S[#st.S + 1], st.Y[#st.Y + 1] = s, y
        st.gamma = dot(s, y) / dot(y, y)
      end
      local q, a = {}, {}
      for i = 1, n do q[i] = -g[i] end
      for j = #st.S, 1, -1 do
        a[j] = dot(st.S[j], q) / dot(st.Y[j], st.S[j])
        for i = 1, n do q[i] = q[i] - a[j] * st.Y[j][i] end
      end
      for i = 1, n do q[i] = st.gamma * q[i] end
      for j = 1, #st.S do
        local b = dot(st.Y[j], q) / dot(st.Y[j], st.S[j])
        for i = 1, n do q[i] = q[i] + (a[j] - b) * st.S[j][i] end
      end
      d = q
    end
    st.g_prev = g
    local f_prev = f
    local g1 = 0
    for i = 1, n do g1 = g1 + math.abs(g[i]) end
    t = st.k == 1 and math.min(1, 1 / g1) * lr or lr
    if dot(g, d) > -tol_change then break end
    for i = 1, n do x[i] = x[i] + t * d[i] end
    local done = false
    if iter ~= max_iter then
      f, g = fg(x)
      evals = evals + 1
      done = max_abs(g) <= tol_grad
    end
    if done or iter == max_iter or evals >= max_eval then break end
    if max_abs(d) * math.abs(t) <= tol_change or math.abs(f - f_prev) < tol_change then break end
  end
  st.d, st.t = d, t
end

-- -- the harness (spec/helpers/optim.lua) -------------------------------------------------

-- The state the reference keeps and the optimizer's state tensor it matches.
local state_checks = {
  Rprop = { { "size", "step_size" }, { "prev", "prev" } },
  ASGD = { { "ax", "ax" } },
  RAdam = { { "m", "exp_avg" }, { "v", "exp_avg_sq" } },
}

-- Eight steps against the reference, the kept state included.
local function check_against_reference(name, opts, dtype)
  local params, opt = O.check_against_reference(name, opts, dtype, ref[name], 8, state_checks[name])
  for _, p in ipairs(params) do assert.are.equal(8, opt.state[p].step:item()) end
end

local names = { "RAdam", "Rprop", "ASGD" }

local configs = {
  RAdam = {
    defaults = {},
    ["weight decay"] = { lr = 0.1, weight_decay = 0.1 },
    ["decoupled weight decay"] = { lr = 0.1, weight_decay = 0.3, decoupled_weight_decay = true },
    maximize = { lr = 0.1, maximize = true },
    -- rho_t: 1, 1.95, 2.86, 3.74 (no rectifier: its root is of a negative), 4.58, then 5.39 > 5
    ["betas and eps, rectified from step 6"] = { lr = 0.1, betas = { 0.5, 0.9 }, eps = 1e-3 },
  },
  Rprop = {
    defaults = {},
    ["etas and step sizes, clamped at both ends"] = { lr = 0.1, etas = { 0.3, 1.5 }, step_sizes = { 0.04, 0.12 } },
    maximize = { lr = 0.05, maximize = true },
    ["an lr outside the step sizes"] = { lr = 1, step_sizes = { 1e-3, 0.3 } },
  },
  ASGD = {
    defaults = {},
    ["weight decay"] = { lr = 0.1, weight_decay = 0.1 },
    maximize = { lr = 0.1, maximize = true },
    ["averaging from step 3, lambd and alpha"] = { lr = 0.2, lambd = 0.05, alpha = 0.5, t0 = 2 },
  },
}

local float32_config = {
  RAdam = "betas and eps, rectified from step 6",
  Rprop = "etas and step sizes, clamped at both ends",
  ASGD = "averaging from step 3, lambd and alpha",
}

-- f(x) = 0.5 x'Ax - b'x + 0.1 sum x^4 (A symmetric positive definite) and its
-- gradient, in plain Lua and as a closure over tide tensors.
local A = { { 3, 1, 0.5 }, { 1, 2, 0.25 }, { 0.5, 0.25, 1 } }
local b = { 1, -2, 0.5 }
local function quartic_fg(x)
  local f, g = 0, {}
  for i = 1, 3 do
    local ax = 0
    for j = 1, 3 do ax = ax + A[i][j] * x[j] end
    f = f + 0.5 * x[i] * ax - b[i] * x[i] + 0.1 * x[i] ^ 4
    g[i] = ax - b[i] + 0.4 * x[i] ^ 3
  end
  return f, g
end
local function quartic_closure(opt, x)
  local At, bt = tide.tensor(A, x:dtype()), tide.tensor(b, x:dtype())
  return function()
    opt:zero_grad()
    local loss = 0.5 * x:dot(At:mv(x)) - bt:dot(x) + 0.1 * (x ^ 4):sum()
    loss:backward()
    return loss
  end
end

-- The Rosenbrock function of x (2 elements), as a closure for opt.
local function rosenbrock_closure(opt, x)
  return function()
    opt:zero_grad()
    local x1, x2 = x:select(1, 1), x:select(1, 2)
    local loss = (1 - x1) ^ 2 + 100 * (x2 - x1 * x1) ^ 2
    loss:backward()
    return loss
  end
end

describe("optim, more optimizers", function()
  describe("follow their update rules", function()
    O.each_config(it, names, configs, float32_config, check_against_reference)
  end)

  it("have PyTorch's defaults and are reachable from tide.optim", function()
    local p = tide.tensor({ 1 }, { requires_grad = true })
    assert.are.same({ lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0, decoupled_weight_decay = false,
                      maximize = false }, optim.RAdam({ p }).defaults)
    assert.are.same({ lr = 1e-2, etas = { 0.5, 1.2 }, step_sizes = { 1e-6, 50 }, maximize = false },
      optim.Rprop({ p }).defaults)
    assert.are.same({ lr = 1e-2, lambd = 1e-4, alpha = 0.75, t0 = 1e6, weight_decay = 0, maximize = false },
      optim.ASGD({ p }).defaults)
    assert.are.same({ lr = 1, max_iter = 20, max_eval = 25, tolerance_grad = 1e-7, tolerance_change = 1e-9,
                      history_size = 100, line_search_fn = false }, optim.LBFGS({ p }).defaults)
    assert.are.equal(12, optim.LBFGS({ p }, { max_iter = 10 }).defaults.max_eval)
    assert.are.equal(7, optim.LBFGS({ p }, { max_iter = 10, max_eval = 7 }).defaults.max_eval)
    local hy = optim.Rprop({ p }, { etas = { 0.25, 2 } }):hyperparameter_tensors(1)
    assert.are.same({ 0.25, 2, "float64" }, { hy.etaminus:item(), hy.etaplus:item(), hy.etaplus:dtype() })
    assert.are.equal(7, optim.ASGD({ p }, { t0 = 7 }):hyperparameter_tensors(1).t0:item())
    for _, name in ipairs { "RAdam", "Rprop", "ASGD", "LBFGS" } do
      assert.is_true(optim.Optimizer.is_optimizer(optim[name]({ p })), name)
    end
  end)

  it("take non-contiguous gradients and parameters", function()
    for _, name in ipairs(names) do
      local base = tide.tensor({ { 1, -2, 3 }, { 0.5, 2, -1 } }, "float64")
      local gts = { tide.tensor({ { 0.3, -1 }, { 2, 0.5 }, { -0.7, 1.5 } }, "float64"),
                    tide.tensor({ { -0.2, -1 }, { 1, -0.5 }, { -0.7, 2 } }, "float64") }
      local a = base:clone():requires_grad_()
      local b2 = base:t():clone():t():detach():requires_grad_()   -- the same values, stored transposed
      assert.is_false(b2:is_contiguous())
      local oa = optim[name]({ a }, { lr = 0.1 })
      local ob = optim[name]({ b2 }, { lr = 0.1 })
      for i = 1, 8 do
        local gt = gts[i % 2 + 1]
        a.grad = gt:t():contiguous()
        b2.grad = gt:t()
        oa:step()
        ob:step()
      end
      H.close(b2, a:totable(), 1e-14, 0, name)
      assert.is_true((a - base):abs():max():item() > 1e-3, name .. " did not move")
    end
  end)

  describe("state_dict", function()
    local cases = {
      { "RAdam", { lr = 0.05, betas = { 0.5, 0.9 }, weight_decay = 0.01 }, { "step", "exp_avg", "exp_avg_sq" } },
      { "Rprop", { lr = 0.05, etas = { 0.4, 1.3 } }, { "step", "prev", "step_size" } },
      { "ASGD", { lr = 0.05, lambd = 0.01, t0 = 3, weight_decay = 0.01 }, { "step", "eta", "mu", "ax" } },
    }
    for _, case in ipairs(cases) do
      local name, opts, keys = case[1], case[2], case[3]
      it(name .. ": a fresh optimizer loaded with it mid-run takes identical steps", function()
        -- RAdam's rectification starts at step 6 here, ASGD's averaging at 4
        O.state_dict_round_trip(name, opts, keys, 4, 4)
      end)
    end
  end)

  describe("compiled steps", function()
    local cases = {
      { "RAdam", { lr = 0.05, betas = { 0.5, 0.9 }, weight_decay = 0.01, decoupled_weight_decay = true } },
      { "Rprop", { lr = 0.05, etas = { 0.4, 1.3 } } },
      { "ASGD", { lr = 0.05, lambd = 0.01, t0 = 3, weight_decay = 0.01 } },
    }
    for _, case in ipairs(cases) do
      it(case[1] .. " gives the eager results bit for bit, with an lr schedule between replays", function()
        -- 9 steps: across RAdam's switch to rectified steps (step 6) and ASGD's averaging (4)
        O.compiled_matches_eager(case[1], case[2], 0.9, 9, 6)
      end)
    end
  end)

  describe("on a CUDA device", function()
    for _, name in ipairs(names) do
      local opts = configs[name][float32_config[name]]
      C.on_gpu(name .. " takes the steps it takes on the CPU", function()
        local function run(dev)
          local params, refs, coefs = O.make_params("float32")
          for k, p in ipairs(params) do params[k] = p:detach():to(dev):requires_grad_() end
          local opt = optim[name](params, opts)
          for step = 1, 8 do
            O.set_grads(params, refs, coefs, "float32", step)
            opt:step()
          end
          return params, opt
        end
        local cpu = run("cpu")
        local gpu, opt = run(C.DEV)
        for k = 1, #cpu do
          C.same(cpu[k], gpu[k], name .. " param " .. k)
          for key, v in pairs(opt.state[gpu[k]]) do assert.are.equal(C.DEV, v:device(), key) end
        end
      end)
    end
  end)

  describe("LBFGS", function()
    it("follows the published algorithm step by step (history dropped, fixed steps)", function()
      for _, o in ipairs {
        { max_iter = 4, history_size = 2 },
        { lr = 0.5, max_iter = 3 },
        { lr = 0.8, max_iter = 5, max_eval = 3, history_size = 1 },
      } do
        local x0 = { 0.7, -1.2, 2 }
        local x = tide.tensor(x0, { dtype = "float64", requires_grad = true })
        local opt = optim.LBFGS({ x }, o)
        local closure = quartic_closure(opt, x)
        local want, st = { x0[1], x0[2], x0[3] }, {}
        for step = 1, 4 do
          local loss = opt:step(closure)
          assert.is_true(tide.is_tensor(loss))
          ref.LBFGS(want, quartic_fg, st, o)
          H.close(x, want, 1e-10, 1e-12, "step " .. step)
        end
        assert.are.equal(st.k, opt.state[x].n_iter)
      end
    end)

    it("splits the flat vector over several parameters, float32 too", function()
      for _, dtype in ipairs { "float64", "float32" } do
        local a = tide.tensor({ 0.7, -1.2 }, { dtype = dtype, requires_grad = true })
        local c = tide.tensor({ { 2 } }, { dtype = dtype, requires_grad = true })
        local unused = tide.zeros(2, { dtype = dtype, requires_grad = true })   -- its grad stays nil
        local o = { max_iter = 4, history_size = 2 }
        local opt = optim.LBFGS({ a, unused, c }, o)
        local At, bt = tide.tensor(A, dtype), tide.tensor(b, dtype)
        local function closure()
          opt:zero_grad()
          local x = tide.cat({ a, c:reshape(-1) }, 1)
          local loss = 0.5 * x:dot(At:mv(x)) - bt:dot(x) + 0.1 * (x ^ 4):sum()
          loss:backward()
          return loss
        end
        local want, st = { 0.7, -1.2, 2 }, {}
        for step = 1, 3 do
          opt:step(closure)
          ref.LBFGS(want, quartic_fg, st, o)
          local rtol = dtype == "float32" and 1e-4 or 1e-10
          H.close(a, { want[1], want[2] }, rtol, rtol, dtype .. " step " .. step)
          H.close(c, { { want[3] } }, rtol, rtol, dtype .. " step " .. step)
          H.equal(unused, { 0, 0 })
        end
      end
    end)

    it("takes the first step along -g, scaled by min(1, 1 / |g|_1) lr", function()
      -- f = x1^2 + 2 x2^2: g = (2 x1, 4 x2)
      for _, case in ipairs { { { 1, -2 }, 1 }, { { 1, -2 }, 0.5 }, { { 0.125, 0.0625 }, 0.5 } } do
        local x0, lr = case[1], case[2]
        local x = tide.tensor(x0, { dtype = "float64", requires_grad = true })
        local opt = optim.LBFGS({ x }, { lr = lr, max_iter = 1 })
        local calls = 0
        opt:step(function()
          calls = calls + 1
          opt:zero_grad()
          local loss = (x ^ 2 * tide.tensor({ 1, 2 }, "float64")):sum()
          loss:backward()
          return loss
        end)
        local g = { 2 * x0[1], 4 * x0[2] }
        local t = math.min(1, 1 / (math.abs(g[1]) + math.abs(g[2]))) * lr
        -- within rounding: a device computes t with its own reductions and fused multiply-adds
        H.close(x, { x0[1] - t * g[1], x0[2] - t * g[2] }, 1e-15, 1e-17)
        assert.are.equal(1, calls)
      end
    end)

    it("converges on the Rosenbrock function from (-1.5, 2), with and without the line search", function()
      for _, o in ipairs { {}, { line_search_fn = "strong_wolfe" }, { lr = 0.5, history_size = 10 } } do
        local x = tide.tensor({ -1.5, 2 }, { dtype = "float64", requires_grad = true })
        local opt = optim.LBFGS({ x }, o)
        local closure = rosenbrock_closure(opt, x)
        local first = opt:step(closure):item()
        assert.are.equal(12.5, first)   -- 2.5^2 + 100 (2 - 2.25)^2
        for _ = 1, 30 do opt:step(closure) end
        H.close(x, { 1, 1 }, 0, 1e-4, o.line_search_fn or "fixed steps, lr " .. (o.lr or 1))
        assert.is_true(closure():item() < 1e-9)
      end
    end)

    it("accepts a line search step that satisfies the strong Wolfe conditions on a quadratic", function()
      -- f = 0.5 x'Qx - c'x
      local Q, c = { { 0.3, 0.1 }, { 0.1, 0.2 } }, { 1, -1 }
      local function fg(x)
        local g = { Q[1][1] * x[1] + Q[1][2] * x[2] - c[1], Q[2][1] * x[1] + Q[2][2] * x[2] - c[2] }
        return 0.5 * (x[1] * (g[1] + c[1]) + x[2] * (g[2] + c[2])) - c[1] * x[1] - c[2] * x[2], g
      end
      -- g = (2.5, -2) at x0; the exact minimiser along -g is t = 6.12. lr 1: the
      -- first trial (t = 1 / |g|_1 = 0.22) is too short, the search extrapolates;
      -- lr 100: it is far too long (22.2), the search zooms in
      for _, lr in ipairs { 1, 100 } do
        local x0 = { 20, -25 }
        local x = tide.tensor(x0, { dtype = "float64", requires_grad = true })
        local opt = optim.LBFGS({ x }, { lr = lr, max_iter = 1, line_search_fn = "strong_wolfe" })
        local Qt, ct = tide.tensor(Q, "float64"), tide.tensor(c, "float64")
        opt:step(function()
          opt:zero_grad()
          local loss = 0.5 * x:dot(Qt:mv(x)) - ct:dot(x)
          loss:backward()
          return loss
        end)
        local f0, g0 = fg(x0)
        local d = { -g0[1], -g0[2] }
        local x1 = x:totable()
        local t = (x1[1] - x0[1]) / d[1]
        assert.is_true(math.abs(x1[2] - (x0[2] + t * d[2])) < 1e-12, "moved along -g")
        local f1, g1 = fg(x1)
        local gd0 = dot(g0, d)
        assert.is_true(t > 0, "lr " .. lr .. ": t = " .. t)
        assert.is_true(f1 <= f0 + 1e-4 * t * gd0, "lr " .. lr .. ": sufficient decrease")
        assert.is_true(math.abs(dot(g1, d)) <= 0.9 * math.abs(gd0), "lr " .. lr .. ": curvature")
        assert.is_true(opt.state[x].func_evals >= 3, "lr " .. lr .. ": the search tried more than one step")
        local t_first = lr / (math.abs(g0[1]) + math.abs(g0[2]))
        if lr == 1 then
          assert.is_true(t > t_first)
        else
          -- on a quadratic the cubic through the ends is the function itself: the
          -- first point zoom tries is the exact minimiser, and it is accepted
          local gQg = g0[1] * (Q[1][1] * g0[1] + Q[1][2] * g0[2]) + g0[2] * (Q[2][1] * g0[1] + Q[2][2] * g0[2])
          assert.is_true(math.abs(t - dot(g0, g0) / gQg) < 1e-12, "t = " .. t)
          assert.are.equal(3, opt.state[x].func_evals)
        end
      end
    end)

    it("state_dict mid-run: a fresh optimizer loaded with it takes identical steps", function()
      for _, o in ipairs { { max_iter = 3, history_size = 2 }, { max_iter = 2, line_search_fn = "strong_wolfe" } } do
        local x = tide.tensor({ -1.5, 2 }, { dtype = "float64", requires_grad = true })
        local opt = optim.LBFGS({ x }, o)
        local closure = rosenbrock_closure(opt, x)
        for _ = 1, 3 do opt:step(closure) end
        local sd = opt:state_dict()
        local st = sd.state[1]
        local n_iter = st.n_iter
        assert.is_true(n_iter >= 3 and #st.old_dirs > 0 and #st.old_dirs == #st.ro)
        assert.are.equal(2, st.d:numel())
        local y = x:detach():clone():requires_grad_()
        local opt2 = optim.LBFGS({ y }, { lr = 0.1 })
        opt2:load_state_dict(sd)
        assert.are.equal(o.max_iter, opt2.param_groups[1].max_iter)
        local closure2 = rosenbrock_closure(opt2, y)
        for step = 1, 3 do
          opt:step(closure)
          opt2:step(closure2)
          H.equal(y, x:totable(), "step " .. step)
        end
        -- the snapshot is a copy: the steps since changed nothing in it
        assert.are.equal(n_iter, sd.state[1].n_iter)
        assert.is_true(opt.state[x].n_iter > n_iter)
        sd.state[1].d = tide.zeros(3, "float64")
        assert.has_error(function() opt2:load_state_dict(sd) end,
          "LBFGS: load_state_dict: d must be a vector of 2 elements (the parameters' count), got shape [3]")
        sd.state[1].d = nil
        assert.has_error(function() opt2:load_state_dict(sd) end,
          "LBFGS: load_state_dict: the state of parameter 1 lacks d")
      end
    end)

    it("takes its lr from a schedule", function()
      local x = tide.tensor({ 1, -2 }, { dtype = "float64", requires_grad = true })
      local opt = optim.LBFGS({ x }, { max_iter = 1 })
      local sched = optim.StepLR(opt, { step_size = 1, gamma = 0.5 })
      local function closure()
        opt:zero_grad()
        local loss = (x ^ 2):sum()
        loss:backward()
        return loss
      end
      opt:step(closure)   -- the first step: min(1, 1 / |g|_1) lr, |g|_1 = 6
      sched:step()
      assert.are.equal(0.5, opt.param_groups[1].lr)
      local x1 = x:totable()
      opt:step(closure)   -- then the L-BFGS direction times lr: on x^2, -x exactly, halved
      H.close(x, { x1[1] / 2, x1[2] / 2 }, 1e-12, 0)
    end)

    it("reports bad closures, groups and parameters", function()
      local x = tide.tensor({ 1, 2 }, { requires_grad = true })
      local opt = optim.LBFGS({ x })
      assert.has_error(function() opt:step() end, "LBFGS: step: needs a closure that re-evaluates the loss " ..
        "(zero_grad, forward, backward, return the loss), got nil")
      assert.has_error(function() opt:step(function() x.grad = tide.ones(2); return x end) end,
        "LBFGS: step: the closure must return the loss (a one-element tensor or a number), got a tensor of 2 elements")
      local y = tide.tensor({ 1 }, { requires_grad = true })
      assert.has_error(function() optim.LBFGS({ { params = { x } }, { params = { y } } }) end,
        "LBFGS: supports one param group only, got 2")
      assert.has_error(function() opt:add_param_group({ params = { y } }) end,
        "LBFGS: add_param_group: LBFGS supports one param group only")
      local z = tide.tensor({ 1 }, { dtype = "float64", requires_grad = true })
      assert.has_error(function() optim.LBFGS({ x, z }) end, "LBFGS: all parameters must have one dtype and " ..
        "device: parameter 1 is float32 on " .. x:device() .. ", parameter 2 float64 on " .. z:device())
    end)
  end)

  it("optimizers reject bad options, naming the optimizer and the value", function()
    local p = tide.tensor({ 1, 2 }, { requires_grad = true })
    local cases = {
      { "RAdam", { lr = -1 }, "RAdam: lr must be >= 0, got -1" },
      { "RAdam", { betas = { 0.9, 1 } }, "RAdam: beta2 must be in [0, 1), got 1" },
      { "RAdam", { eps = -1 }, "RAdam: eps must be >= 0, got -1" },
      { "RAdam", { weight_decay = -0.5 }, "RAdam: weight_decay must be >= 0, got -0.5" },
      { "RAdam", { decoupled_weight_decay = 1 }, "RAdam: decoupled_weight_decay must be a boolean, got 1" },
      { "RAdam", { amsgrad = true }, "RAdam: unknown option 'amsgrad'" },
      { "Rprop", { lr = -1 }, "Rprop: lr must be >= 0, got -1" },
      { "Rprop", { etas = 0.5 }, "Rprop: etas must be a table of two numbers, got 0.5" },
      { "Rprop", { etas = { 0.5 } }, "Rprop: etas must be a table of two numbers, got a table of 1 values" },
      { "Rprop", { etas = { 1.5, 1.2 } }, "Rprop: etas must satisfy 0 < etaminus < 1 < etaplus, got {1.5, 1.2}" },
      { "Rprop", { etas = { 0.5, 0.9 } }, "Rprop: etas must satisfy 0 < etaminus < 1 < etaplus, got {0.5, 0.9}" },
      { "Rprop", { step_sizes = { 1, 0.5 } }, "Rprop: step_sizes must satisfy 0 <= min <= max, got {1, 0.5}" },
      { "Rprop", { step_sizes = { -1, 0.5 } }, "Rprop: step_sizes must satisfy 0 <= min <= max, got {-1, 0.5}" },
      { "Rprop", { maximize = "no" }, "Rprop: maximize must be a boolean, got 'no'" },
      { "Rprop", { weight_decay = 0.1 }, "Rprop: unknown option 'weight_decay'" },
      { "ASGD", { lr = -1 }, "ASGD: lr must be >= 0, got -1" },
      { "ASGD", { lambd = -1e-4 }, "ASGD: lambd must be >= 0, got -0.0001" },
      { "ASGD", { alpha = "x" }, "ASGD: alpha must be a number, got 'x'" },
      { "ASGD", { t0 = true }, "ASGD: t0 must be a number, got true" },
      { "ASGD", { weight_decay = -1 }, "ASGD: weight_decay must be >= 0, got -1" },
      { "LBFGS", { lr = -1 }, "LBFGS: lr must be >= 0, got -1" },
      { "LBFGS", { max_iter = 0 }, "LBFGS: max_iter must be a positive integer, got 0" },
      { "LBFGS", { max_iter = 2.5 }, "LBFGS: max_iter must be a positive integer, got 2.5" },
      { "LBFGS", { max_eval = -3 }, "LBFGS: max_eval must be a positive integer, got -3" },
      { "LBFGS", { tolerance_grad = -1 }, "LBFGS: tolerance_grad must be >= 0, got -1" },
      { "LBFGS", { tolerance_change = "x" }, "LBFGS: tolerance_change must be a number, got 'x'" },
      { "LBFGS", { history_size = 0 }, "LBFGS: history_size must be a positive integer, got 0" },
      { "LBFGS", { line_search_fn = "backtracking" },
        "LBFGS: line_search_fn must be nil or 'strong_wolfe', got 'backtracking'" },
      { "LBFGS", { momentum = 0.9 }, "LBFGS: unknown option 'momentum'" },
    }
    for _, case in ipairs(cases) do
      assert.has_error(function() optim[case[1]]({ p }, case[2]) end, case[3])
    end
  end)
end)
