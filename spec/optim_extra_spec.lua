-- optim, the extra optimizers and schedules: Adagrad, Adadelta, Adamax and
-- NAdam against their published update rules computed here in plain Lua
-- float64 (weight decay, maximize and each option), non-contiguous gradients,
-- state dict round trips, compiled steps equal to eager ones; MultiStepLR,
-- ExponentialLR, LambdaLR, MultiplicativeLR, LinearLR, ConstantLR, PolynomialLR,
-- CosineAnnealingWarmRestarts, SequentialLR and ReduceLROnPlateau against lr
-- sequences worked out by hand from PyTorch's rules; their state dicts; every
-- error message.
local tide = require "tide"
local H = require "spec.helpers"
local O = require "spec.helpers.optim"

local optim = tide.optim

-- -- references ----------------------------------------------------------------------------

-- The published update rules, one element at a time, in float64. p, g: arrays
-- of numbers; st: the parameter's state (arrays and counters); o: the group's options.
local ref = {}

function ref.Adagrad(p, g, st, o)
  local lr, lr_decay, eps = o.lr or 1e-2, o.lr_decay or 0, o.eps or 1e-10
  st.t = (st.t or 0) + 1
  if st.sum == nil then
    st.sum = {}
    for i = 1, #p do st.sum[i] = o.initial_accumulator_value or 0 end
  end
  local clr = lr / (1 + (st.t - 1) * lr_decay)
  for i = 1, #p do
    local gi = g[i]
    if o.maximize then gi = -gi end
    gi = gi + (o.weight_decay or 0) * p[i]
    st.sum[i] = st.sum[i] + gi * gi
    p[i] = p[i] - clr * gi / (math.sqrt(st.sum[i]) + eps)
  end
end

function ref.Adadelta(p, g, st, o)
  local lr, rho, eps = o.lr or 1, o.rho or 0.9, o.eps or 1e-6
  st.v, st.u = st.v or {}, st.u or {}
  for i = 1, #p do
    local gi = g[i]
    if o.maximize then gi = -gi end
    gi = gi + (o.weight_decay or 0) * p[i]
    st.v[i] = rho * (st.v[i] or 0) + (1 - rho) * gi * gi
    local delta = math.sqrt((st.u[i] or 0) + eps) / math.sqrt(st.v[i] + eps) * gi
    st.u[i] = rho * (st.u[i] or 0) + (1 - rho) * delta * delta
    p[i] = p[i] - lr * delta
  end
end

function ref.Adamax(p, g, st, o)
  local lr, eps = o.lr or 2e-3, o.eps or 1e-8
  local b1, b2 = o.betas and o.betas[1] or 0.9, o.betas and o.betas[2] or 0.999
  st.t = (st.t or 0) + 1
  st.m, st.u = st.m or {}, st.u or {}
  for i = 1, #p do
    local gi = g[i]
    if o.maximize then gi = -gi end
    gi = gi + (o.weight_decay or 0) * p[i]
    st.m[i] = b1 * (st.m[i] or 0) + (1 - b1) * gi
    st.u[i] = math.max(b2 * (st.u[i] or 0), math.abs(gi) + eps)
    p[i] = p[i] - lr / (1 - b1 ^ st.t) * st.m[i] / st.u[i]
  end
end

function ref.NAdam(p, g, st, o)
  local lr, eps, wd, psi = o.lr or 2e-3, o.eps or 1e-8, o.weight_decay or 0, o.momentum_decay or 4e-3
  local b1, b2 = o.betas and o.betas[1] or 0.9, o.betas and o.betas[2] or 0.999
  st.t = (st.t or 0) + 1
  local t = st.t
  st.m, st.v = st.m or {}, st.v or {}
  local mu = b1 * (1 - 0.5 * 0.96 ^ (t * psi))
  local mu_next = b1 * (1 - 0.5 * 0.96 ^ ((t + 1) * psi))
  st.prod = (st.prod or 1) * mu
  for i = 1, #p do
    local gi = g[i]
    if o.maximize then gi = -gi end
    if o.decoupled_weight_decay then p[i] = p[i] * (1 - lr * wd) else gi = gi + wd * p[i] end
    st.m[i] = b1 * (st.m[i] or 0) + (1 - b1) * gi
    st.v[i] = b2 * (st.v[i] or 0) + (1 - b2) * gi * gi
    local denom = math.sqrt(st.v[i] / (1 - b2 ^ t)) + eps
    p[i] = p[i] - lr * (1 - mu) / (1 - st.prod) * gi / denom - lr * mu_next / (1 - st.prod * mu_next) * st.m[i] / denom
  end
end

-- -- the harness (spec/helpers/optim.lua) -------------------------------------------------

local function check_against_reference(name, opts, dtype)
  O.check_against_reference(name, opts, dtype, ref[name], 3)
end

local names = { "Adagrad", "Adadelta", "Adamax", "NAdam" }

local configs = {
  Adagrad = {
    defaults = {},
    ["weight decay"] = { lr = 0.1, weight_decay = 0.1 },
    maximize = { lr = 0.1, maximize = true },
    ["lr decay, initial accumulator, eps"] = { lr = 0.1, lr_decay = 0.5, initial_accumulator_value = 0.3, eps = 1e-3 },
  },
  Adadelta = {
    defaults = {},
    ["weight decay"] = { weight_decay = 0.1 },
    maximize = { lr = 0.5, maximize = true },
    ["rho and eps"] = { lr = 2, rho = 0.5, eps = 1e-3 },
  },
  Adamax = {
    defaults = {},
    ["weight decay"] = { lr = 0.1, weight_decay = 0.1 },
    maximize = { lr = 0.1, maximize = true },
    ["betas and eps"] = { lr = 0.1, betas = { 0.5, 0.8 }, eps = 1e-2 },
  },
  NAdam = {
    defaults = {},
    ["weight decay"] = { lr = 0.1, weight_decay = 0.1 },
    ["decoupled weight decay"] = { lr = 0.1, weight_decay = 0.3, decoupled_weight_decay = true },
    maximize = { lr = 0.1, maximize = true },
    ["betas, eps and momentum decay"] = { lr = 0.1, betas = { 0.7, 0.9 }, eps = 1e-3, momentum_decay = 0.5 },
  },
}

describe("optim extras", function()
  describe("optimizers follow their update rules", function()
    local float32_case = {}
    for _, name in ipairs(names) do float32_case[name] = "weight decay" end
    O.each_config(it, names, configs, float32_case, check_against_reference)
  end)

  it("have PyTorch's defaults and are reachable from tide.optim", function()
    local p = tide.tensor({ 1 }, { requires_grad = true })
    assert.are.same({ lr = 1e-2, lr_decay = 0, weight_decay = 0, initial_accumulator_value = 0, eps = 1e-10,
                      maximize = false }, optim.Adagrad({ p }).defaults)
    assert.are.same({ lr = 1, rho = 0.9, eps = 1e-6, weight_decay = 0, maximize = false },
      optim.Adadelta({ p }).defaults)
    assert.are.same({ lr = 2e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0, maximize = false },
      optim.Adamax({ p }).defaults)
    assert.are.same({ lr = 2e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0, momentum_decay = 4e-3,
                      decoupled_weight_decay = false, maximize = false }, optim.NAdam({ p }).defaults)
    local hy = optim.NAdam({ p }, { momentum_decay = 0.25 }):hyperparameter_tensors(1)
    assert.are.same({ 0.25, "float64" }, { hy.momentum_decay:item(), hy.momentum_decay:dtype() })
    assert.are.equal(0.5, optim.Adadelta({ p }, { rho = 0.5 }):hyperparameter_tensors(1).rho:item())
  end)

  it("take non-contiguous gradients and parameters", function()
    for _, name in ipairs(names) do
      local base = tide.tensor({ { 1, -2, 3 }, { 0.5, 2, -1 } }, "float64")
      local gt = tide.tensor({ { 0.3, -1 }, { 2, 0.5 }, { -0.7, 1.5 } }, "float64")
      local a = base:clone():requires_grad_()
      local b = base:t():clone():t():detach():requires_grad_()   -- the same values, stored transposed
      assert.is_false(b:is_contiguous())
      local lr = name == "Adadelta" and 10 or 0.1
      local oa = optim[name]({ a }, { lr = lr, weight_decay = 0.1 })
      local ob = optim[name]({ b }, { lr = lr, weight_decay = 0.1 })
      for _ = 1, 3 do
        a.grad = gt:t():contiguous()
        b.grad = gt:t()
        oa:step()
        ob:step()
      end
      H.close(b, a:totable(), 1e-14, 0, name)
      H.close(a, base:totable(), 0, 1, name)   -- they moved, but not far
      assert.is_true((a - base):abs():max():item() > 1e-3, name .. " did not move")
    end
  end)

  it("step empty parameters (zero elements), as PyTorch does", function()
    for _, name in ipairs(names) do
      local p = tide.zeros({ 0, 3 }, { requires_grad = true })
      local q = tide.tensor({ 1 }, { dtype = "float64", requires_grad = true })
      local opt = optim[name]({ p, q }, { lr = 0.1, weight_decay = 0.1 })
      for _ = 1, 2 do
        p.grad, q.grad = tide.zeros(0, 3), tide.ones(1, "float64")
        opt:step()
      end
      assert.are.same({ 0, 3 }, p:shape())
      assert.are.equal(2, opt.state[p].step:item())
      local st = {}
      local want = { 1 }
      for _ = 1, 2 do ref[name](want, { 1 }, st, { lr = 0.1, weight_decay = 0.1 }) end
      H.close(q, want, 1e-12, 0, name)
    end
  end)

  describe("state_dict", function()
    local cases = {
      { "Adagrad", { lr = 0.1, lr_decay = 0.1, initial_accumulator_value = 0.1, weight_decay = 0.01 },
        { "step", "sum" } },
      { "Adadelta", { lr = 0.5, weight_decay = 0.01 }, { "step", "square_avg", "acc_delta" } },
      { "Adamax", { lr = 0.05, weight_decay = 0.01 }, { "step", "exp_avg", "exp_inf" } },
      { "NAdam", { lr = 0.05, weight_decay = 0.01, decoupled_weight_decay = true },
        { "step", "mu_product", "exp_avg", "exp_avg_sq" } },
    }
    for _, case in ipairs(cases) do
      local name, opts, keys = case[1], case[2], case[3]
      it(name .. ": a fresh optimizer loaded with it takes identical steps", function()
        O.state_dict_round_trip(name, opts, keys, 3, 3)
      end)
    end
  end)

  describe("compiled steps", function()
    local cases = {
      { "Adagrad", { lr = 0.1, lr_decay = 0.05, weight_decay = 0.01, initial_accumulator_value = 0.1 } },
      { "Adadelta", { lr = 1, weight_decay = 0.01, maximize = false } },
      { "Adamax", { lr = 0.05, weight_decay = 0.01 } },
      { "NAdam", { lr = 0.05, weight_decay = 0.01, decoupled_weight_decay = true } },
    }
    for _, case in ipairs(cases) do
      it(case[1] .. " gives the eager results bit for bit, with an lr schedule between replays", function()
        O.compiled_matches_eager(case[1], case[2], 0.8, 6, 3)
      end)
    end
  end)

  it("optimizers reject bad options, naming the optimizer and the value", function()
    local p = tide.tensor({ 1, 2 }, { requires_grad = true })
    local cases = {
      { "Adagrad", { lr = -1 }, "Adagrad: lr must be >= 0, got -1" },
      { "Adagrad", { lr_decay = -0.1 }, "Adagrad: lr_decay must be >= 0, got -0.1" },
      { "Adagrad", { weight_decay = -1 }, "Adagrad: weight_decay must be >= 0, got -1" },
      { "Adagrad", { initial_accumulator_value = -1 }, "Adagrad: initial_accumulator_value must be >= 0, got -1" },
      { "Adagrad", { eps = -1 }, "Adagrad: eps must be >= 0, got -1" },
      { "Adagrad", { maximize = 1 }, "Adagrad: maximize must be a boolean, got 1" },
      { "Adagrad", { momentum = 0.9 }, "Adagrad: unknown option 'momentum'" },
      { "Adadelta", { lr = -1 }, "Adadelta: lr must be >= 0, got -1" },
      { "Adadelta", { rho = 1.5 }, "Adadelta: rho must be in [0, 1], got 1.5" },
      { "Adadelta", { rho = -0.1 }, "Adadelta: rho must be in [0, 1], got -0.1" },
      { "Adadelta", { rho = "x" }, "Adadelta: rho must be a number, got 'x'" },
      { "Adadelta", { eps = -1 }, "Adadelta: eps must be >= 0, got -1" },
      { "Adadelta", { weight_decay = -1 }, "Adadelta: weight_decay must be >= 0, got -1" },
      { "Adamax", { lr = -1 }, "Adamax: lr must be >= 0, got -1" },
      { "Adamax", { betas = { 1, 0.9 } }, "Adamax: beta1 must be in [0, 1), got 1" },
      { "Adamax", { betas = { 0.9, -0.5 } }, "Adamax: beta2 must be in [0, 1), got -0.5" },
      { "Adamax", { betas = 0.9 }, "Adamax: betas must be a table of two numbers, got 0.9" },
      { "Adamax", { eps = -1 }, "Adamax: eps must be >= 0, got -1" },
      { "Adamax", { weight_decay = -1 }, "Adamax: weight_decay must be >= 0, got -1" },
      { "Adamax", { amsgrad = true }, "Adamax: unknown option 'amsgrad'" },
      { "NAdam", { betas = { 0.9 } }, "NAdam: betas must be a table of two numbers, got a table of 1 values" },
      { "NAdam", { momentum_decay = -1 }, "NAdam: momentum_decay must be >= 0, got -1" },
      { "NAdam", { decoupled_weight_decay = "yes" }, "NAdam: decoupled_weight_decay must be a boolean, got 'yes'" },
      { "NAdam", { maximize = 0 }, "NAdam: maximize must be a boolean, got 0" },
    }
    for _, case in ipairs(cases) do
      assert.has_error(function() optim[case[1]]({ p }, case[2]) end, case[3])
    end
  end)

  -- -- schedules -------------------------------------------------------------------------------

  describe("lr_scheduler", function()
    local function sgd(lrs)
      local groups = {}
      for i, lr in ipairs(lrs) do
        groups[i] = { params = { tide.tensor({ i }, { requires_grad = true }) }, lr = lr }
      end
      return optim.SGD(groups, { momentum = 0.9 })
    end
    -- Steps sched (made on opt) n times; checks get_last_lr(), the groups' lr and
    -- their tensors against want[t + 1][group] (or want[t + 1] for every group) at each step t.
    local function against(opt, sched, want, rtol)
      for t = 0, #want - 1 do
        if t > 0 then sched:step() end
        local last = sched:get_last_lr()
        for gi, group in ipairs(opt.param_groups) do
          local w = want[t + 1]
          if type(w) == "table" then w = w[gi] end
          assert.is_true(math.abs(last[gi] - w) <= (rtol or 1e-14) * math.abs(w) + 1e-300,
            string.format("%s step %d group %d: %.17g ~= %.17g", sched.name, t, gi, last[gi], w))
          assert.are.equal(last[gi], group.lr)
          assert.are.equal(group.lr, opt:hyperparameter_tensors(gi).lr:item())
        end
        assert.are.equal(t, sched.last_epoch)
      end
    end

    it("are reachable from tide.optim and tide.optim.lr_scheduler", function()
      for _, name in ipairs { "MultiStepLR", "ExponentialLR", "LambdaLR", "MultiplicativeLR", "LinearLR",
                              "ConstantLR", "PolynomialLR", "CosineAnnealingWarmRestarts", "SequentialLR",
                              "ReduceLROnPlateau", "StepLR", "CosineAnnealingLR", "OneCycleLR" } do
        assert.is_table(optim.lr_scheduler[name], name)
        assert.are.equal(optim.lr_scheduler[name], optim[name])
      end
    end)

    it("MultiStepLR", function()
      local opt = sgd { 1, 0.5 }
      local s = optim.MultiStepLR(opt, { milestones = { 2, 5, 6 }, gamma = 0.5 })
      local one = { 1, 1, 0.5, 0.5, 0.5, 0.25, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125 }
      local want = {}
      for t, v in ipairs(one) do want[t] = { v, v / 2 } end
      against(opt, s, want)
      opt = sgd { 0.1 }
      against(opt, optim.MultiStepLR(opt, { milestones = { 3 } }), { 0.1, 0.1, 0.1, 0.1 * 0.1, 0.1 * 0.1 })
      assert.are.equal(0.1, opt.param_groups[1].initial_lr)
    end)

    it("ExponentialLR", function()
      local opt = sgd { 1, 3 }
      local want = {}
      for t = 0, 12 do want[t + 1] = { 0.5 ^ t, 3 * 0.5 ^ t } end
      against(opt, optim.ExponentialLR(opt, { gamma = 0.5 }), want)
    end)

    it("LambdaLR, one function or one per group", function()
      local opt = sgd { 1, 2 }
      local seen = {}
      local s = optim.LambdaLR(opt, { lr_lambda = function(e) seen[#seen + 1] = e; return 1 / (e + 1) end })
      against(opt, s, { { 1, 2 }, { 1 / 2, 1 }, { 1 / 3, 2 / 3 }, { 1 / 4, 1 / 2 }, { 1 / 5, 2 / 5 } })
      assert.are.same({ 0, 0, 1, 1, 2, 2, 3, 3, 4, 4 }, seen)
      opt = sgd { 1, 2 }
      s = optim.LambdaLR(opt, { lr_lambda = { function(e) return e end, function(e) return 0.5 ^ e end } })
      against(opt, s, { { 0, 2 }, { 1, 1 }, { 2, 0.5 }, { 3, 0.25 } })
      assert.are.same({ last_epoch = 3, _step_count = 4, base_lrs = { 1, 2 }, _last_lr = { 3, 0.25 } },
        s:state_dict())
    end)

    it("MultiplicativeLR multiplies the current lr, a change made by hand included", function()
      local opt = sgd { 1, 2 }
      local s = optim.MultiplicativeLR(opt, { lr_lambda = { function() return 0.5 end, function(e) return e end } })
      against(opt, s, { { 1, 2 }, { 0.5, 2 }, { 0.25, 4 }, { 0.125, 12 } })
      opt.param_groups[1].lr = 10
      s:step()
      assert.are.same({ 5, 48 }, s:get_last_lr())
    end)

    it("LinearLR, defaults and given factors", function()
      local opt = sgd { 0.3 }
      local want = {}
      for t = 0, 11 do want[t + 1] = 0.3 * (1 / 3 + (2 / 3) * math.min(t, 5) / 5) end
      against(opt, optim.LinearLR(opt), want, 1e-14)
      assert.are.equal(0.3 * 1 / 3, want[1])
      assert.are.equal(0.3, want[12])
      opt = sgd { 1 }
      against(opt, optim.LinearLR(opt, { start_factor = 1, end_factor = 0.5, total_iters = 4 }),
        { 1, 0.875, 0.75, 0.625, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5 })
    end)

    it("ConstantLR, defaults and given factor", function()
      local opt = sgd { 0.9 }
      local third = 0.9 * (1 / 3)
      against(opt, optim.ConstantLR(opt), { third, third, third, third, third, 0.9 * (1 / 3 + 2 / 3), 0.9, 0.9, 0.9,
        0.9, 0.9, 0.9 })
      opt = sgd { 1 }
      against(opt, optim.ConstantLR(opt, { factor = 0.25, total_iters = 2 }), { 0.25, 0.25, 1, 1, 1, 1 })
    end)

    it("PolynomialLR, defaults and a power", function()
      local opt = sgd { 1 }
      against(opt, optim.PolynomialLR(opt), { 1, 0.8, 0.6, 0.4, 0.2, 0, 0, 0, 0, 0, 0, 0 }, 1e-14)
      opt = sgd { 2 }
      against(opt, optim.PolynomialLR(opt, { total_iters = 4, power = 2 }),
        { 2, 2 * 0.5625, 2 * 0.25, 2 * 0.0625, 0, 0, 0, 0, 0, 0, 0, 0 }, 1e-14)
    end)

    it("CosineAnnealingWarmRestarts, T_mult 1 and 2, and a fractional epoch", function()
      local function cos_lr(base, eta_min, t_cur, t_i) return eta_min + (base - eta_min) * (1 + math.cos(math.pi *
        t_cur / t_i)) / 2 end
      local opt = sgd { 1, 0.5 }
      local s = optim.CosineAnnealingWarmRestarts(opt, { T_0 = 4, eta_min = 0.1 })
      local want = {}
      for t = 0, 12 do want[t + 1] = { cos_lr(1, 0.1, t % 4, 4), cos_lr(0.5, 0.1, t % 4, 4) } end
      against(opt, s, want)
      assert.are.equal(1, want[9][1])   -- restarts at 4, 8, 12
      -- T_mult 2: cycles of 3, 6, 12 steps; (T_cur, T_i) for steps 0..12 worked out by hand
      opt = sgd { 1 }
      s = optim.CosineAnnealingWarmRestarts(opt, { T_0 = 3, T_mult = 2 })
      local cur = { { 0, 3 }, { 1, 3 }, { 2, 3 }, { 0, 6 }, { 1, 6 }, { 2, 6 }, { 3, 6 }, { 4, 6 }, { 5, 6 },
                    { 0, 12 }, { 1, 12 }, { 2, 12 }, { 3, 12 } }
      want = {}
      for i, c in ipairs(cur) do want[i] = cos_lr(1, 0, c[1], c[2]) end
      against(opt, s, want)
      assert.are.same({ 3, 12 }, { s.T_cur, s.T_i })
      -- step(epoch): 10.5 is 1.5 into the third cycle (3 + 6 = 9 steps before it)
      s:step(10.5)
      assert.are.same({ 1.5, 12, 10 }, { s.T_cur, s.T_i, s.last_epoch })
      assert.are.equal(cos_lr(1, 0, 1.5, 12), s:get_last_lr()[1])
      s:step()
      assert.are.same({ 2.5, 12, 11 }, { s.T_cur, s.T_i, s.last_epoch })
      s:step(2)
      assert.are.same({ 2, 3, 2 }, { s.T_cur, s.T_i, s.last_epoch })
      assert.are.equal(cos_lr(1, 0, 2, 3), opt.param_groups[1].lr)
      assert.has_error(function() s:step(-1) end, "CosineAnnealingWarmRestarts: step: epoch must be a number >= 0, " ..
        "got -1")
    end)

    it("SequentialLR restarts each schedule at its milestone", function()
      local opt = sgd { 1, 0.5 }
      local s1 = optim.ConstantLR(opt, { factor = 0.5, total_iters = 10 })
      local s2 = optim.ExponentialLR(opt, { gamma = 0.5 })
      local s3 = optim.StepLR(opt, { step_size = 2, gamma = 0.1 })
      local s = optim.SequentialLR(opt, { s1, s2, s3 }, { 2, 5 })
      local one = { 0.5, 0.5, 1, 0.5, 0.25, 1, 1, 0.1, 0.1, 0.01, 0.01, 0.001, 0.001 }
      local want = {}
      for t, v in ipairs(one) do want[t] = { v, v / 2 } end
      against(opt, s, want, 1e-15)
      assert.are.same({ 1, 2, 7 }, { s1.last_epoch, s2.last_epoch, s3.last_epoch })
      -- the options-table form; a warm-up into a cosine
      opt = sgd { 1 }
      local warm = optim.LinearLR(opt, { start_factor = 0.25, total_iters = 3 })
      local cos = optim.CosineAnnealingLR(opt, { T_max = 4 })
      s = optim.SequentialLR(opt, { schedulers = { warm, cos }, milestones = { 3 } })
      against(opt, s, { 0.25, 0.5, 0.75, 1, (1 + math.cos(math.pi / 4)) / 2, 0.5, (1 + math.cos(3 * math.pi / 4)) / 2,
        0, (1 + math.cos(5 * math.pi / 4)) / 2 }, 1e-14)
    end)

    describe("ReduceLROnPlateau", function()
      it("waits patience steps, cools down, and stops at min_lr", function()
        local opt = sgd { 1 }
        local s = optim.ReduceLROnPlateau(opt, { patience = 2, cooldown = 1, factor = 0.5, min_lr = 0.2,
                                                  threshold = 0.1 })
        assert.are.same({ 1 }, s:get_last_lr())
        assert.are.equal(0, s.last_epoch)
        local metrics = { 10, 9.5, 9.2, 9.1, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8 }
        local want = { 1, 1, 1, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25, 0.2, 0.2, 0.2, 0.2, 0.2 }
        for i, m in ipairs(metrics) do
          s:step(m)
          assert.are.equal(want[i], s:get_last_lr()[1], "step " .. i)
          assert.are.equal(want[i], opt:hyperparameter_tensors(1).lr:item(), "step " .. i)
        end
        assert.are.same({ 8, 16 }, { s.best, s.last_epoch })
      end)
      it("mode max with an absolute threshold, patience 0, a tensor metric", function()
        local opt = sgd { 1 }
        local s = optim.ReduceLROnPlateau(opt, { mode = "max", threshold_mode = "abs", threshold = 0.5, patience = 0 })
        local metrics = { 1, 1.4, 2, 2.4, 2.6, 3 }
        local want = { 1, 0.1, 0.1, 0.1 * 0.1, 0.1 * 0.1, 0.1 * 0.1 * 0.1 }
        for i, m in ipairs(metrics) do
          s:step(tide.tensor(m, "float64"))
          assert.are.equal(want[i], s:get_last_lr()[1], "step " .. i)
        end
        assert.are.equal(2.6, s.best)
      end)
      it("relative thresholds in both modes", function()
        local opt = sgd { 1 }
        local s = optim.ReduceLROnPlateau(opt, { mode = "max", threshold = 0.1, patience = 0 })
        s:step(10)
        s:step(10.9)   -- not above 10 * 1.1
        assert.are.same({ 0.1, 10 }, { s:get_last_lr()[1], s.best })
        s:step(11.5)
        assert.are.same({ 0.1, 11.5 }, { s:get_last_lr()[1], s.best })
        opt = sgd { 1 }
        s = optim.ReduceLROnPlateau(opt, { threshold = 0.5, patience = 0 })
        s:step(10)
        s:step(5.5)    -- not below 10 * 0.5
        assert.are.same({ 0.1, 10 }, { s:get_last_lr()[1], s.best })
        s:step(4.5)
        assert.are.same({ 0.1, 4.5 }, { s:get_last_lr()[1], s.best })
      end)
      it("a min_lr per group, and changes smaller than eps skipped", function()
        local opt = sgd { 1, 1e-3 }
        local s = optim.ReduceLROnPlateau(opt, { patience = 0, min_lr = { 0.05, 0 }, eps = 2e-4 })
        local want = { { 1, 1e-3 }, { 0.1, 1e-4 }, { 0.05, 1e-4 }, { 0.05, 1e-4 } }
        for i, w in ipairs(want) do
          s:step(1)
          local got = s:get_last_lr()
          assert.is_true(math.abs(got[1] - w[1]) < 1e-15 and math.abs(got[2] - w[2]) < 1e-18,
            string.format("step %d: %s, %s", i, got[1], got[2]))
        end
      end)
      it("state_dict and load_state_dict continue it", function()
        local opt = sgd { 1 }
        local s = optim.ReduceLROnPlateau(opt, { patience = 1, cooldown = 2 })
        for _, m in ipairs { 5, 6, 7 } do s:step(m) end
        local sd = s:state_dict()
        assert.are.same({ 5, 0, 2, 3 }, { sd.best, sd.num_bad_epochs, sd.cooldown_counter, sd.last_epoch })
        local opt2 = sgd { 1 }
        local s2 = optim.ReduceLROnPlateau(opt2, { patience = 5 })
        opt2:load_state_dict(opt:state_dict())
        s2:load_state_dict(sd)
        for _, m in ipairs { 7, 7, 7, 7, 4, 7, 7 } do
          s:step(m); s2:step(m)
          assert.are.same(s:get_last_lr(), s2:get_last_lr())
          assert.are.same({ s.best, s.num_bad_epochs, s.cooldown_counter }, { s2.best, s2.num_bad_epochs,
            s2.cooldown_counter })
        end
        assert.is_true(s:get_last_lr()[1] < 0.1)
      end)
      it("rejects bad options and metrics", function()
        local opt = sgd { 1 }
        local N = "ReduceLROnPlateau: "
        local cases = {
          { { mode = "mean" }, N .. "mode must be 'min' or 'max', got 'mean'" },
          { { threshold_mode = "relative" }, N .. "threshold_mode must be 'rel' or 'abs', got 'relative'" },
          { { factor = 1 }, N .. "factor must be a number in [0, 1), got 1" },
          { { factor = -0.5 }, N .. "factor must be a number in [0, 1), got -0.5" },
          { { patience = -1 }, N .. "patience must be a non-negative integer, got -1" },
          { { cooldown = 1.5 }, N .. "cooldown must be a non-negative integer, got 1.5" },
          { { threshold = -1 }, N .. "threshold must be a number >= 0, got -1" },
          { { min_lr = -1 }, N .. "min_lr must be a number >= 0, got -1" },
          { { min_lr = { 0, 0 } }, N .. "min_lr must be a number or a table of 1 numbers (one per param group), " ..
            "got a table of 2" },
          { { min_lr = { -1 } }, N .. "min_lr[1] must be a number >= 0, got -1" },
          { { eps = "x" }, N .. "eps must be a number >= 0, got 'x'" },
          { { verbose = true }, N .. "unknown option 'verbose'" },
        }
        for _, case in ipairs(cases) do
          assert.has_error(function() optim.ReduceLROnPlateau(opt, case[1]) end, case[2])
        end
        local s = optim.ReduceLROnPlateau(opt)
        assert.has_error(function() s:step() end,
          N .. "step: the metric must be a number or a one-element tensor, got nil")
        assert.has_error(function() s:step(tide.zeros(2)) end,
          N .. "step: the metric must be a number or a one-element tensor, got a tensor of 2 elements")
        assert.are.equal(0, s.last_epoch)
      end)
    end)

    it("state_dict and load_state_dict continue a schedule", function()
      for _, make in ipairs {
        function(o) return optim.MultiStepLR(o, { milestones = { 2, 6 }, gamma = 0.3 }) end,
        function(o) return optim.ExponentialLR(o, { gamma = 0.9 }) end,
        function(o) return optim.LambdaLR(o, { lr_lambda = function(e) return 1 / (1 + e) end }) end,
        function(o) return optim.MultiplicativeLR(o, { lr_lambda = function() return 0.9 end }) end,
        function(o) return optim.LinearLR(o, { total_iters = 7 }) end,
        function(o) return optim.ConstantLR(o, { total_iters = 6 }) end,
        function(o) return optim.PolynomialLR(o, { total_iters = 8, power = 0.5 }) end,
        function(o) return optim.CosineAnnealingWarmRestarts(o, { T_0 = 3, T_mult = 2, eta_min = 0.01 }) end,
        function(o)
          return optim.SequentialLR(o, { optim.LinearLR(o, { total_iters = 3 }), optim.ExponentialLR(o,
            { gamma = 0.5 }) }, { 5 })
        end,
      } do
        local opt = sgd { 0.1, 0.3 }
        local s = make(opt)
        for _ = 1, 4 do s:step() end
        local osd, ssd = opt:state_dict(), s:state_dict()
        local opt2 = sgd { 1, 1 }
        local s2 = make(opt2)
        opt2:load_state_dict(osd)
        s2:load_state_dict(ssd)
        assert.are.same(s:get_last_lr(), s2:get_last_lr())
        for _ = 1, 6 do
          s:step(); s2:step()
          assert.are.same(s:get_last_lr(), s2:get_last_lr(), s.name)
          assert.are.same(opt.param_groups[2].lr, opt2.param_groups[2].lr, s.name)
        end
        assert.are.equal(ssd.last_epoch + 6, s2.last_epoch)
      end
    end)

    it("errors name the scheduler and the value", function()
      local opt = sgd { 0.1 }
      local f = function() return 1 end
      local cases = {
        { function() optim.MultiStepLR(opt, {}) end, "MultiStepLR: milestones must be a table of increasing " ..
          "integers, got nil" },
        { function() optim.MultiStepLR(opt, { milestones = { 3, 2 } }) end,
          "MultiStepLR: milestones must be increasing, got 2 after 3" },
        { function() optim.MultiStepLR(opt, { milestones = { 3, 3 } }) end,
          "MultiStepLR: milestones must be increasing, got 3 after 3" },
        { function() optim.MultiStepLR(opt, { milestones = { 1.5 } }) end,
          "MultiStepLR: milestones[1] must be an integer >= 0, got 1.5" },
        { function() optim.MultiStepLR(opt, { milestones = { 2 }, gamma = -0.1 }) end,
          "MultiStepLR: gamma must be a number >= 0, got -0.1" },
        { function() optim.ExponentialLR(opt, {}) end, "ExponentialLR: gamma must be a number >= 0, got nil" },
        { function() optim.ExponentialLR(opt, { gamma = -1 }) end,
          "ExponentialLR: gamma must be a number >= 0, got -1" },
        { function() optim.ExponentialLR(opt, { gama = 0.5 }) end, "ExponentialLR: unknown option 'gama'" },
        { function() optim.LambdaLR(opt, {}) end, "LambdaLR: lr_lambda must be a function or a table of 1 " ..
          "functions (one per param group), got nil" },
        { function() optim.LambdaLR(opt, { lr_lambda = { f, f } }) end, "LambdaLR: lr_lambda must be a function " ..
          "or a table of 1 functions (one per param group), got a table of 2" },
        { function() optim.MultiplicativeLR(opt, { lr_lambda = { 0.5 } }) end,
          "MultiplicativeLR: lr_lambda[1] must be a function, got 0.5" },
        { function() optim.LambdaLR(opt, { lr_lambda = function() return "x" end }) end,
          "LambdaLR: lr_lambda of param group 1 returned 'x' at step 0; it must return a number" },
        { function() optim.LinearLR(opt, { start_factor = 0 }) end,
          "LinearLR: start_factor must be a number in (0, 1], got 0" },
        { function() optim.LinearLR(opt, { end_factor = 1.5 }) end,
          "LinearLR: end_factor must be a number in [0, 1], got 1.5" },
        { function() optim.LinearLR(opt, { total_iters = 0 }) end,
          "LinearLR: total_iters must be a positive integer, got 0" },
        { function() optim.ConstantLR(opt, { factor = 2 }) end,
          "ConstantLR: factor must be a number in [0, 1], got 2" },
        { function() optim.ConstantLR(opt, { total_iters = 0 }) end,
          "ConstantLR: total_iters must be a positive integer, got 0" },
        { function() optim.PolynomialLR(opt, { total_iters = 2.5 }) end,
          "PolynomialLR: total_iters must be a positive integer, got 2.5" },
        { function() optim.PolynomialLR(opt, { power = -1 }) end, "PolynomialLR: power must be a number >= 0, got -1" },
        { function() optim.CosineAnnealingWarmRestarts(opt, {}) end,
          "CosineAnnealingWarmRestarts: T_0 must be a positive integer, got nil" },
        { function() optim.CosineAnnealingWarmRestarts(opt, { T_0 = 2, T_mult = 0 }) end,
          "CosineAnnealingWarmRestarts: T_mult must be a positive integer, got 0" },
        { function() optim.CosineAnnealingWarmRestarts(opt, { T_0 = 2, T_mult = 1.5 }) end,
          "CosineAnnealingWarmRestarts: T_mult must be a positive integer, got 1.5" },
        { function() optim.CosineAnnealingWarmRestarts(opt, { T_0 = 2, eta_min = "x" }) end,
          "CosineAnnealingWarmRestarts: eta_min must be a number, got 'x'" },
        { function() optim.ExponentialLR(opt, { gamma = 0.5 }):step(-1) end,
          "ExponentialLR: step: epoch must be a non-negative integer, got -1" },
      }
      for _, case in ipairs(cases) do assert.has_error(case[1], case[2]) end
      -- SequentialLR
      local a = optim.ExponentialLR(opt, { gamma = 0.5 })
      local b = optim.StepLR(opt, { step_size = 2 })
      local other = optim.StepLR(sgd { 0.1 }, { step_size = 2 })
      local plateau = optim.ReduceLROnPlateau(opt)
      local S = "SequentialLR: "
      cases = {
        { function() optim.SequentialLR(opt, {}, {}) end,
          S .. "schedulers must be a non-empty table of schedulers, got an empty table" },
        { function() optim.SequentialLR(opt, { schedulers = 3 }) end,
          S .. "schedulers must be a non-empty table of schedulers, got 3" },
        { function() optim.SequentialLR(opt, { a, 5 }, { 2 }) end, S .. "schedulers[2] must be a scheduler, got 5" },
        { function() optim.SequentialLR(opt, { a, other }, { 2 }) end,
          S .. "schedulers[2] belongs to another optimizer than the one passed in" },
        { function() optim.SequentialLR(opt, { a, plateau }, { 2 }) end,
          S .. "schedulers[2] is a ReduceLROnPlateau, whose step needs a metric; it cannot be sequenced" },
        { function() optim.SequentialLR(opt, { a, b }, { 2, 4 }) end,
          S .. "expects one milestone fewer than schedulers, got 2 schedulers and 2 milestones" },
        { function() optim.SequentialLR(opt, { a, b, b }, { 4, 2 }) end,
          S .. "milestones must be increasing, got 2 after 4" },
        { function() optim.SequentialLR(opt, { a, b }, { 0 }) end,
          S .. "milestones[1] must be an integer >= 1, got 0" },
        { function() optim.SequentialLR(opt, { a, b }) end,
          S .. "milestones must be a table of increasing integers, got nil" },
      }
      for _, case in ipairs(cases) do assert.has_error(case[1], case[2]) end
      local seq = optim.SequentialLR(opt, { a, b }, { 2 })
      local sd = seq:state_dict()
      assert.are.equal(2, #sd._schedulers)
      sd._schedulers[2] = nil
      assert.has_error(function() seq:load_state_dict(sd) end,
        S .. "load_state_dict: '_schedulers' must be a table of 2 scheduler states, got 1")
      local m = optim.MultiStepLR(opt, { milestones = { 2 } })
      assert.has_error(function() m:load_state_dict(optim.ExponentialLR(sgd { 1 }, { gamma = 0.5 }):state_dict()) end,
        "MultiStepLR: load_state_dict: lacks 'milestones' (is it the state of a MultiStepLR?)")
    end)
  end)
end)
