-- optim, CyclicLR and ChainedScheduler: lr (and momentum / beta1) sequences
-- against PyTorch's formulas written out here in plain Lua, the momentum
-- hyperparameter tensors, state dicts, and every error message.
local tide = require "tide"

local optim = tide.optim

-- PyTorch's CyclicLR.get_lr at step t, for one group: (lr, momentum).
local function cyclic_ref(t, o)
  local up = o.up or 2000
  local total = up + (o.down or up)
  local ratio = up / total
  local cycle = math.floor(1 + t / total)
  local x = 1 + t / total - cycle
  local factor = x <= ratio and x / ratio or (x - 1) / (ratio - 1)
  local scale
  if o.scale_fn then
    scale = o.scale_fn((o.scale_mode or "cycle") == "cycle" and cycle or t)
  elseif o.mode == "triangular2" then
    scale = 1 / 2 ^ (cycle - 1)
  elseif o.mode == "exp_range" then
    scale = o.gamma ^ t
  else
    scale = 1
  end
  local bm, mm = o.base_momentum or 0.8, o.max_momentum or 0.9
  return o.base_lr + (o.max_lr - o.base_lr) * factor * scale, mm - (mm - bm) * factor * scale
end

local function close(a, b, what)
  assert.is_true(math.abs(a - b) <= 1e-14 * math.abs(b) + 1e-15, string.format("%s: %.17g ~= %.17g", what, a, b))
end

local function sgd(lrs, opts)
  local groups = {}
  for i, lr in ipairs(lrs) do groups[i] = { params = { tide.tensor({ i }, { requires_grad = true }) }, lr = lr } end
  return optim.SGD(groups, opts or { momentum = 0.5 })
end

describe("optim CyclicLR and ChainedScheduler", function()
  it("are reachable from tide.optim and tide.optim.lr_scheduler", function()
    for _, name in ipairs { "CyclicLR", "ChainedScheduler" } do
      assert.is_table(optim.lr_scheduler[name], name)
      assert.are.equal(optim.lr_scheduler[name], optim[name])
    end
  end)

  describe("CyclicLR", function()
    it("triangular by default, uneven up and down, cycling SGD's momentum", function()
      local opt = sgd { 5 }
      local s = optim.CyclicLR(opt, { base_lr = 0.1, max_lr = 1, step_size_up = 4, step_size_down = 2 })
      -- by hand: up in 4 steps of 0.225, down in 2 of 0.45, then again
      local hand = { 0.1, 0.325, 0.55, 0.775, 1, 0.55, 0.1, 0.325 }
      for t = 0, 20 do
        if t > 0 then s:step() end
        local lr, m = cyclic_ref(t, { base_lr = 0.1, max_lr = 1, up = 4, down = 2 })
        if hand[t + 1] then close(lr, hand[t + 1], "hand step " .. t) end
        local group = opt.param_groups[1]
        close(s:get_last_lr()[1], lr, "lr step " .. t)
        close(group.momentum, m, "momentum step " .. t)
        assert.are.equal(group.lr, opt:hyperparameter_tensors(1).lr:item())
        assert.are.equal(group.momentum, opt:hyperparameter_tensors(1).momentum:item())
      end
      local g = opt.param_groups[1]
      assert.are.same({ 0.1, 0.9, 0.8 }, { g.initial_lr, g.max_momentum, g.base_momentum })
    end)

    it("triangular2 with a value per group, cycling Adam's beta1", function()
      local a = tide.tensor({ 1 }, { requires_grad = true })
      local b = tide.tensor({ 2 }, { requires_grad = true })
      local opt = optim.Adam({ { params = { a } }, { params = { b } } }, { betas = { 0.9, 0.99 } })
      local s = optim.CyclicLR(opt, { base_lr = { 0.01, 0.02 }, max_lr = { 0.1, 0.5 }, step_size_up = 3,
        mode = "triangular2", base_momentum = { 0.7, 0.75 }, max_momentum = 0.95 })
      for t = 0, 24 do
        if t > 0 then s:step() end
        for gi, o in ipairs { { base_lr = 0.01, max_lr = 0.1 }, { base_lr = 0.02, max_lr = 0.5 } } do
          o.up, o.mode, o.max_momentum = 3, "triangular2", 0.95
          o.base_momentum = gi == 1 and 0.7 or 0.75
          local lr, m = cyclic_ref(t, o)
          local group = opt.param_groups[gi]
          close(group.lr, lr, "lr step " .. t)
          close(group.betas[1], m, "beta1 step " .. t)
          assert.are.equal(0.99, group.betas[2])
          assert.are.equal(group.betas[1], opt:hyperparameter_tensors(gi).beta1:item())
        end
      end
      -- the third cycle's peak (step 15) reaches a quarter of the height
      assert.are.equal(0.01 + 0.09 / 4, select(1, cyclic_ref(15, { base_lr = 0.01, max_lr = 0.1, up = 3,
        mode = "triangular2" })))
    end)

    it("exp_range scales by gamma^step; cycle_momentum = false leaves the momentum alone", function()
      local opt = optim.Adagrad({ tide.tensor({ 1 }, { requires_grad = true }) })
      local s = optim.CyclicLR(opt, { base_lr = 0.1, max_lr = 0.3, step_size_up = 2, mode = "exp_range",
        gamma = 0.9, cycle_momentum = false })
      for t = 0, 12 do
        if t > 0 then s:step() end
        close(opt.param_groups[1].lr, (cyclic_ref(t, { base_lr = 0.1, max_lr = 0.3, up = 2, mode = "exp_range",
          gamma = 0.9 })), "lr step " .. t)
      end
      assert.is_nil(opt.param_groups[1].max_momentum)
      opt = sgd({ 1 }, { momentum = 0.3 })
      optim.CyclicLR(opt, { base_lr = 0.1, max_lr = 0.3, cycle_momentum = false }):step()
      assert.are.equal(0.3, opt.param_groups[1].momentum)
    end)

    it("a custom scale_fn, of the cycle or of the step count (mode is then ignored)", function()
      for _, smode in ipairs { "cycle", "iterations" } do
        local seen = {}
        local fn = function(x) seen[#seen + 1] = x; return 1 / (1 + x) end
        local opt = sgd { 1 }
        local s = optim.CyclicLR(opt, { base_lr = 0.2, max_lr = 0.6, step_size_up = 2, step_size_down = 3,
          scale_fn = fn, scale_mode = smode, mode = "no such mode" })
        for t = 0, 11 do
          if t > 0 then s:step() end
          local lr, m = cyclic_ref(t, { base_lr = 0.2, max_lr = 0.6, up = 2, down = 3,
            scale_fn = function(x) return 1 / (1 + x) end, scale_mode = smode })
          close(s:get_last_lr()[1], lr, smode .. " lr step " .. t)
          close(opt.param_groups[1].momentum, m, smode .. " momentum step " .. t)
        end
        assert.are.same(smode == "cycle" and { 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3 } or
          { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 }, seen)
      end
    end)

    it("state_dict and load_state_dict continue the cycle", function()
      local make = function(o) return optim.CyclicLR(o, { base_lr = 0.1, max_lr = 1, step_size_up = 3,
        mode = "triangular2" }) end
      local opt = sgd { 0.5 }
      local s = make(opt)
      for _ = 1, 4 do s:step() end
      local opt2 = sgd { 0.5 }
      local s2 = make(opt2)
      opt2:load_state_dict(opt:state_dict())
      s2:load_state_dict(s:state_dict())
      for _ = 1, 8 do
        s:step(); s2:step()
        assert.are.same(s:get_last_lr(), s2:get_last_lr())
        assert.are.equal(opt.param_groups[1].momentum, opt2.param_groups[1].momentum)
      end
      assert.are.equal(12, s2.last_epoch)
    end)

    it("rejects bad options, naming the value", function()
      local opt = sgd { 0.1 }
      local cases = {
        { {}, "CyclicLR: base_lr is required" },
        { { base_lr = 0.1 }, "CyclicLR: max_lr is required" },
        { { base_lr = { 0.1, 0.2 }, max_lr = 1 }, "CyclicLR: base_lr must be a number or a table of 1 numbers " ..
          "(one per param group), got a table of 2" },
        { { base_lr = 0.1, max_lr = "x" }, "CyclicLR: max_lr must be a number or a table of 1 numbers " ..
          "(one per param group), got 'x'" },
        { { base_lr = 0.1, max_lr = 1, step_size_up = 0 }, "CyclicLR: step_size_up must be a number > 0, got 0" },
        { { base_lr = 0.1, max_lr = 1, step_size_down = -2 },
          "CyclicLR: step_size_down must be a number > 0, got -2" },
        { { base_lr = 0.1, max_lr = 1, mode = "square" }, "CyclicLR: mode must be 'triangular', 'triangular2' or " ..
          "'exp_range' (or give scale_fn), got 'square'" },
        { { base_lr = 0.1, max_lr = 1, scale_fn = 2 }, "CyclicLR: scale_fn must be a function, got 2" },
        { { base_lr = 0.1, max_lr = 1, scale_mode = "epoch" },
          "CyclicLR: scale_mode must be 'cycle' or 'iterations', got 'epoch'" },
        { { base_lr = 0.1, max_lr = 1, gamma = "x" }, "CyclicLR: gamma must be a number, got 'x'" },
        { { base_lr = 0.1, max_lr = 1, cycle_momentum = 1 }, "CyclicLR: cycle_momentum must be a boolean, got 1" },
        { { base_lr = 0.1, max_lr = 1, max_momentum = {} }, "CyclicLR: max_momentum must be a number or a " ..
          "table of 1 numbers (one per param group), got a table of 0" },
        { { base_lr = 0.1, max_lr = 1, step = 2 }, "CyclicLR: unknown option 'step'" },
        { { base_lr = 0.1, max_lr = 1, scale_fn = function() return "x" end },
          "CyclicLR: scale_fn returned 'x' at step 0; it must return a number" },
      }
      for _, case in ipairs(cases) do
        assert.has_error(function() optim.CyclicLR(opt, case[1]) end, case[2])
      end
      local ada = optim.Adagrad({ tide.tensor({ 1 }, { requires_grad = true }) })
      assert.has_error(function() optim.CyclicLR(ada, { base_lr = 0.1, max_lr = 1 }) end,
        "CyclicLR: cycle_momentum needs an optimizer with momentum or betas; Adagrad has neither " ..
        "(pass cycle_momentum = false)")
    end)
  end)

  describe("ChainedScheduler", function()
    it("multiplies ConstantLR's and ExponentialLR's factors", function()
      local opt = sgd { 1, 2 }
      local c = optim.ConstantLR(opt, { factor = 0.1, total_iters = 2 })
      local e = optim.ExponentialLR(opt, { gamma = 0.9 })
      local s = optim.ChainedScheduler({ c, e })
      local want = { 0.1, 0.09, 0.81, 0.729, 0.6561, 0.59049 }
      for t = 0, #want - 1 do
        if t > 0 then s:step() end
        for gi = 1, 2 do
          close(opt.param_groups[gi].lr, gi * want[t + 1], "step " .. t)
          assert.are.equal(opt.param_groups[gi].lr, opt:hyperparameter_tensors(gi).lr:item())
        end
        assert.are.same(e:get_last_lr(), s:get_last_lr())
        assert.are.same({ t, t, t }, { s.last_epoch, c.last_epoch, e.last_epoch })
      end
    end)

    it("steps PyTorch's recursive forms: LinearLR, StepLR, MultiStepLR, PolynomialLR, CosineAnnealingLR", function()
      local opt = sgd { 0.8 }
      local scheds = {
        optim.LinearLR(opt, { start_factor = 0.5, total_iters = 4 }),
        optim.StepLR(opt, { step_size = 3, gamma = 0.5 }),
        optim.MultiStepLR(opt, { milestones = { 5, 9 }, gamma = 0.2 }),
        optim.PolynomialLR(opt, { total_iters = 6, power = 2 }),
        optim.CosineAnnealingLR(opt, { T_max = 4, eta_min = 0.01 }),
      }
      local s = optim.ChainedScheduler(scheds, opt)
      -- PyTorch's chainable get_lr of each, applied in order to one lr
      local lr = 0.8
      local function chain(t)
        if t == 0 then lr = lr * 0.5 elseif t <= 4 then lr = lr * (1 + 0.5 / (4 * 0.5 + (t - 1) * 0.5)) end
        if t > 0 and t % 3 == 0 then lr = lr * 0.5 end
        if t == 5 or t == 9 then lr = lr * 0.2 end
        if t > 0 and t <= 6 then lr = lr * ((1 - t / 6) / (1 - (t - 1) / 6)) ^ 2 end
        if t > 0 then
          if (t - 1 - 4) % 8 == 0 then
            lr = lr + (0.8 - 0.01) * (1 - math.cos(math.pi / 4)) / 2
          else
            lr = (1 + math.cos(math.pi * t / 4)) / (1 + math.cos(math.pi * (t - 1) / 4)) * (lr - 0.01) + 0.01
          end
        end
        return lr
      end
      for t = 0, 14 do
        if t > 0 then s:step() end
        close(opt.param_groups[1].lr, chain(t), "step " .. t)
      end
    end)

    it("a schedule without a chainable form sets its closed form, as in PyTorch", function()
      local opt = sgd { 1 }
      local e = optim.ExponentialLR(opt, { gamma = 0.5 })
      local l = optim.LambdaLR(opt, { lr_lambda = function(t) return 1 / (t + 1) end })
      local s = optim.ChainedScheduler({ l, e })   -- the lambda first, then gamma once on top
      for t = 0, 5 do
        if t > 0 then s:step() end
        close(opt.param_groups[1].lr, 1 / (t + 1) * (t > 0 and 0.5 or 1), "step " .. t)
      end
    end)

    it("state_dict and load_state_dict continue the chain", function()
      local function make(o)
        return optim.ChainedScheduler({ optim.ConstantLR(o, { factor = 0.5, total_iters = 3 }),
          optim.ExponentialLR(o, { gamma = 0.8 }) })
      end
      local opt = sgd { 1 }
      local s = make(opt)
      for _ = 1, 2 do s:step() end
      local opt2 = sgd { 1 }
      local s2 = make(opt2)
      opt2:load_state_dict(opt:state_dict())
      s2:load_state_dict(s:state_dict())
      for _ = 1, 5 do
        s:step(); s2:step()
        assert.are.same(s:get_last_lr(), s2:get_last_lr())
      end
      assert.has_error(function() s2:load_state_dict({ last_epoch = 1 }) end, "ChainedScheduler: load_state_dict: " ..
        "'_schedulers' must be a table of 2 scheduler states, got nil")
    end)

    it("rejects what it cannot chain", function()
      local opt = sgd { 0.1 }
      local a = optim.ExponentialLR(opt, { gamma = 0.5 })
      local other = optim.StepLR(sgd { 0.1 }, { step_size = 2 })
      assert.has_error(function() optim.ChainedScheduler({}) end,
        "ChainedScheduler: schedulers must be a non-empty table of schedulers, got an empty table")
      assert.has_error(function() optim.ChainedScheduler(a) end,
        "ChainedScheduler: schedulers must be a non-empty table of schedulers, got ExponentialLR (last_epoch 0, lr 0.1)")
      assert.has_error(function() optim.ChainedScheduler({ a, 3 }) end,
        "ChainedScheduler: schedulers[2] must be a scheduler, got 3")
      assert.has_error(function() optim.ChainedScheduler({ 3 }) end,
        "ChainedScheduler: schedulers[1] must be a scheduler, got 3")
      assert.has_error(function() optim.ChainedScheduler({ a, other }) end,
        "ChainedScheduler: schedulers[2] belongs to another optimizer than schedulers[1]")
      assert.has_error(function() optim.ChainedScheduler({ a, optim.ReduceLROnPlateau(opt) }) end,
        "ChainedScheduler: schedulers[2] is a ReduceLROnPlateau, whose step needs a metric; it cannot be chained")
    end)
  end)
end)
