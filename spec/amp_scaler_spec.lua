-- tide.amp.GradScaler: scale() and unscale_() exactly (powers of two),
-- skipped steps and backoff on inf and NaN, growth after growth_interval good
-- steps, a float32 training loop that matches one without the scaler, a
-- float16 one that stays finite, state dicts, the disabled scaler, gradients
-- on a second device, and the errors. Runs on the default device (the suite
-- also runs with TIDE_DEFAULT_DEVICE=cuda:0).
local tide = require "tide"
local H = require "spec.helpers"
local GradScaler = tide.amp.GradScaler

local F = tide.nn.functional

-- A parameter holding vals, and an SGD over it.
local function param(vals, dtype)
  local p = tide.tensor(vals, { dtype = dtype or "float32", requires_grad = true })
  return p, tide.optim.SGD({ p }, { lr = 0.5 })
end

-- Gives p the gradient vals (as backward would, in p's dtype and device).
local function set_grad(p, vals)
  p.grad = tide.tensor(vals, { dtype = p:dtype(), device = p:device() })
end

-- A scaler that has made its scale (on the default device).
local function ready_scaler(opts)
  local sc = GradScaler(opts)
  sc:scale(tide.ones({}))
  return sc
end

describe("tide.amp.GradScaler", function()
  it("starts at init_scale with PyTorch's defaults", function()
    local sc = GradScaler()
    assert.equals(2 ^ 16, sc:get_scale())
    assert.equals(2, sc:get_growth_factor())
    assert.equals(0.5, sc:get_backoff_factor())
    assert.equals(2000, sc:get_growth_interval())
    assert.is_true(sc:is_enabled())
    assert.equals(2 ^ 10, GradScaler("cuda", { init_scale = 2 ^ 10 }):get_scale())
    assert.equals(2 ^ 10, GradScaler("cpu", { init_scale = 2 ^ 10 }):get_scale())
  end)

  it("scales a tensor or a table of tensors by exactly the scale, recorded for backward", function()
    local sc = GradScaler({ init_scale = 2 ^ 10 })
    local x = tide.tensor({ 1.5, -3, 0.25 }, { requires_grad = true })
    local y = sc:scale(x)
    H.equal(y, { 1536, -3072, 256 })
    assert.equals(x:device(), y:device())
    y:sum():backward()
    H.equal(x.grad, { 1024, 1024, 1024 })
    local r = sc:scale({ x, { loss = x:sum() } })
    H.equal(r[1], { 1536, -3072, 256 })
    H.equal(r[2].loss, -1280)
    local h = sc:scale(tide.tensor({ 0.5 }, { dtype = "float16" }))
    assert.equals("float16", h:dtype())   -- as PyTorch's: the 0-d scale does not promote
    H.equal(h, { 512 })
  end)

  it("makes its scale on the first output's device and copies it to others", H.on_cpu(function()
    local sc = GradScaler({ init_scale = 8 })
    H.equal(sc:scale(tide.tensor({ 2 })), { 16 })
    local z = sc:scale(tide.tensor({ 3 }, { device = "cpu:1" }))
    assert.equals("cpu:1", z:device())
    H.equal(z:cpu(), { 24 })
  end))

  it("unscale_ divides every gradient by the scale exactly, float16 and bfloat16 too", function()
    local sc = ready_scaler({ init_scale = 2 ^ 12 })
    local p = tide.tensor({ 1, 2, 3 }, { requires_grad = true })
    local q = tide.tensor({ 1, 2 ^ -10 }, { dtype = "float16", requires_grad = true })
    local b = tide.tensor({ 1, 2 }, { dtype = "bfloat16", requires_grad = true })
    local u = tide.tensor({ 4 }, { requires_grad = true })   -- no grad: left alone
    local opt = tide.optim.SGD({ p, q, b, u }, { lr = 0.5 })
    set_grad(p, { 4096, -2048, 3 })
    set_grad(q, { 8192, 1 })   -- 1 / 2^12 is a float16 subnormal, exact
    set_grad(b, { 40960, -0.5 })
    sc:unscale_(opt)
    H.equal(p.grad, { 1, -0.5, 3 / 4096 })
    H.equal(q.grad, { 2, 2 ^ -12 })
    assert.equals("float16", q.grad:dtype())
    H.equal(b.grad, { 10, -2 ^ -13 })
    assert.equals("bfloat16", b.grad:dtype())
    assert.is_nil(u.grad)
    sc:step(opt)   -- does not unscale again
    H.equal(p, { 0.5, 2.25, 3 - 1.5 / 4096 })
    H.equal(q, { 0, 7 * 2 ^ -13 })
  end)

  it("unscales gradients on another device with the scale copied there", H.on_cpu(function()
    local sc = GradScaler({ init_scale = 4 })
    sc:scale(tide.ones({}))
    local p = tide.tensor({ 1, 2 }, { device = "cpu:1", requires_grad = true })
    local opt = tide.optim.SGD({ p }, { lr = 1 })
    set_grad(p, { 8, -4 })
    sc:step(opt)
    H.equal(p:cpu(), { -1, 3 })
    sc:update()
    assert.equals(4, sc:get_scale())
    assert.equals(1, sc:state_dict()._growth_tracker)
  end))

  for _, bad in ipairs { { "inf", math.huge }, { "-inf", -math.huge }, { "NaN", 0 / 0 } } do
    it("skips the step and backs off the scale when a gradient holds " .. bad[1], function()
      local sc = ready_scaler({ init_scale = 2 ^ 8, growth_interval = 3 })
      local p = tide.tensor({ 1, 2 }, { requires_grad = true })
      local q = tide.tensor({ 5 }, { requires_grad = true })
      local opt = tide.optim.SGD({ p, q }, { lr = 0.5 })
      set_grad(p, { 256, 512 })   -- good steps first, so the tracker has counted
      set_grad(q, { 256 })
      sc:step(opt); sc:update()
      assert.equals(1, sc:state_dict()._growth_tracker)
      H.equal(p, { 0.5, 1 })
      set_grad(p, { 256, bad[2] })
      set_grad(q, { 256 })
      assert.is_nil(sc:step(opt))
      H.equal(p, { 0.5, 1 })
      H.equal(q, { 4.5 })
      sc:update()
      assert.equals(2 ^ 7, sc:get_scale())
      assert.equals(0, sc:state_dict()._growth_tracker)
    end)
  end

  it("reads to the host once per iteration, in step()", function()
    local reads, saved = 0, {}
    for _, name in ipairs { "item", "totable", "data_ptr", "wait" } do
      saved[name] = tide.Tensor[name]
      tide.Tensor[name] = function(...) reads = reads + 1; return saved[name](...) end
    end
    finally(function() for name, f in pairs(saved) do tide.Tensor[name] = f end end)
    local sc = GradScaler({ growth_interval = 2 })
    local p, opt = param({ 1, 2 })
    local seen = {}
    for i = 1, 3 do
      opt:zero_grad()
      sc:scale((p * p):sum()):backward()
      if i == 2 then p.grad:fill_(math.huge) end
      sc:unscale_(opt)
      local before = reads
      sc:step(opt)
      seen[#seen + 1] = before .. "/" .. reads
      sc:update()
      sc:update(2 ^ 10)
    end
    assert.same({ "0/1", "1/2", "2/3" }, seen)
  end)

  it("returns the optimizer's step's result when it steps", function()
    local sc = ready_scaler()
    local p, opt = param({ 1 })
    opt.step = function() return "stepped" end
    set_grad(p, { 1 })
    assert.equals("stepped", sc:step(opt))
  end)

  it("grows the scale after growth_interval good steps in a row", function()
    local sc = ready_scaler({ init_scale = 16, growth_interval = 3, growth_factor = 4, backoff_factor = 0.25 })
    local p, opt = param({ 0 })
    local function iteration(g)
      set_grad(p, { g })
      sc:step(opt); sc:update()
      return sc:get_scale(), sc:state_dict()._growth_tracker
    end
    local seen = {}
    for _, g in ipairs { 1, 1, 1, 1, math.huge, 1, 1, 1 } do
      local s, t = iteration(g)
      seen[#seen + 1] = s .. "/" .. t
    end
    assert.same({ "16/1", "16/2", "64/0", "64/1", "16/0", "16/1", "16/2", "64/0" }, seen)
  end)

  it("does not grow the scale past float32's range", function()
    local sc = ready_scaler({ init_scale = 2 ^ 127, growth_interval = 1 })
    local p, opt = param({ 0 })
    set_grad(p, { 1 })
    sc:step(opt); sc:update()
    assert.equals(2 ^ 127, sc:get_scale())
    assert.equals(0, sc:state_dict()._growth_tracker)
  end)

  it("takes a new scale from update(new_scale), a number or a one-element tensor", function()
    local sc = ready_scaler({ init_scale = 16 })
    sc:update(2 ^ 20)
    assert.equals(2 ^ 20, sc:get_scale())
    H.equal(sc:scale(tide.tensor({ 1 })), { 2 ^ 20 })
    sc:update(tide.tensor({ 32 }))
    assert.equals(32, sc:get_scale())
    sc:update(tide.full({}, 8, { dtype = "float64" }))
    H.equal(sc:scale(tide.tensor({ 1 })), { 8 })
  end)

  it("trains a float32 model to the same parameters as without the scaler", function()
    tide.manual_seed(3)
    local x = tide.randn({ 16, 3 })
    local y = x:matmul(tide.tensor({ { 1.5 }, { -2 }, { 0.5 } })) + 0.25
    local plain = tide.nn.Linear(3, 1)
    local scaled = plain:clone()
    local opt1 = tide.optim.SGD(plain:parameters(), { lr = 0.1 })
    local opt2 = tide.optim.SGD(scaled:parameters(), { lr = 0.1 })
    local sc = GradScaler({ init_scale = 2 ^ 14, growth_interval = 5 })
    for _ = 1, 30 do
      opt1:zero_grad()
      F.mse_loss(plain(x), y):backward()
      opt1:step()
      opt2:zero_grad()
      sc:scale(F.mse_loss(scaled(x), y)):backward()
      sc:step(opt2)
      sc:update()
    end
    assert.equals(2 ^ 20, sc:get_scale())   -- six growths, no overflow
    H.close(scaled.weight, plain.weight, 0, 1e-6)
    H.close(scaled.bias, plain.bias, 0, 1e-6)
    assert.is_true(F.mse_loss(plain(x), y):item() < 0.01)
  end)

  it("trains a float16 model without NaN, backing off while the scaled loss overflows", function()
    tide.manual_seed(4)
    local model = tide.nn.Linear(3, 1):half()
    local x = tide.randn({ 16, 3 }):half()
    local y = x:float():matmul(tide.tensor({ { 1.5 }, { -2 }, { 0.5 } })):half()
    local opt = tide.optim.SGD(model:parameters(), { lr = 0.05 })
    local sc = GradScaler()   -- 2^16 overflows float16 (largest: 65504): the first steps are skipped
    local first = F.mse_loss(model(x), y):float():item()
    local skipped = 0
    for _ = 1, 60 do
      opt:zero_grad()
      local loss = F.mse_loss(model(x), y)
      assert.equals("float16", loss:dtype())
      sc:scale(loss):backward()
      local before = sc:get_scale()
      sc:step(opt)
      sc:update()
      if sc:get_scale() < before then skipped = skipped + 1 end
    end
    assert.is_true(skipped >= 1, "expected the scale to back off at least once")
    for _, p in ipairs(model:parameters()) do
      assert.equals("float16", p:dtype())
      assert.is_false(tide.isfinite(p):logical_not():any():item(), "a parameter is not finite")
    end
    local last = F.mse_loss(model(x), y):float():item()
    assert.is_true(last < 0.01, string.format("loss %g -> %g", first, last))
  end)

  it("round-trips its state dict with PyTorch's keys", function()
    local sc = ready_scaler({ init_scale = 2 ^ 10, growth_interval = 7, growth_factor = 3, backoff_factor = 0.25 })
    local p, opt = param({ 0 })
    for _, g in ipairs { math.huge, 1, 1 } do
      set_grad(p, { g }); sc:step(opt); sc:update()
    end
    local sd = sc:state_dict()
    assert.same({ scale = 2 ^ 8, growth_factor = 3, backoff_factor = 0.25, growth_interval = 7, _growth_tracker = 2 },
      sd)
    local fresh = GradScaler()
    fresh:load_state_dict(sd)
    assert.same(sd, fresh:state_dict())
    H.equal(fresh:scale(tide.tensor({ 1 })), { 2 ^ 8 })
    local used = ready_scaler()   -- one whose tensors exist already
    used:load_state_dict(sd)
    assert.same(sd, used:state_dict())
    H.equal(used:scale(tide.tensor({ 1 })), { 2 ^ 8 })
    for _ = 1, 5 do   -- the loaded tracker counts on: 2 + 5 = 7 grows the scale
      set_grad(p, { 1 }); sc:step(opt); sc:update()
      local q, o = param({ 0 })
      set_grad(q, { 1 }); used:step(o); used:update()
    end
    assert.equals(2 ^ 8 * 3, used:get_scale())
    assert.same(sc:state_dict(), used:state_dict())
  end)

  it("passes everything through when disabled", function()
    local sc = GradScaler({ enabled = false })
    assert.is_false(sc:is_enabled())
    local x = tide.tensor({ 3 })
    assert.is_true(rawequal(x, sc:scale(x)))
    local list = { x }
    assert.is_true(rawequal(list, sc:scale(list)))
    assert.equals(1, sc:get_scale())
    local p, opt = param({ 1 })
    set_grad(p, { 2 })
    sc:unscale_(opt)
    sc:unscale_(opt)
    H.equal(p.grad, { 2 })
    sc:step(opt)
    H.equal(p, { 0 })
    set_grad(p, { math.huge })
    sc:step(opt)   -- no inf check either
    H.equal(p, { -math.huge })
    sc:update()
    assert.same({}, sc:state_dict())
    sc:load_state_dict({ scale = 4, growth_factor = 2, backoff_factor = 0.5, growth_interval = 1, _growth_tracker = 0 })
    assert.equals(1, sc:get_scale())
  end)

  describe("errors", function()
    it("rejects bad options", function()
      local function bad(opts, msg) assert.has_error(function() GradScaler(opts) end, msg) end
      bad({ init_scale = 0 }, "GradScaler: init_scale must be a positive finite number, got 0")
      bad({ init_scale = -1 }, "GradScaler: init_scale must be a positive finite number, got -1")
      bad({ init_scale = "big" }, "GradScaler: init_scale must be a positive finite number, got 'big'")
      bad({ growth_factor = 1 }, "GradScaler: growth_factor must be a finite number > 1, got 1")
      bad({ backoff_factor = 1 }, "GradScaler: backoff_factor must be a number in (0, 1), got 1")
      bad({ backoff_factor = 0 }, "GradScaler: backoff_factor must be a number in (0, 1), got 0")
      bad({ growth_interval = 0 }, "GradScaler: growth_interval must be a positive integer, got 0")
      bad({ growth_interval = 2.5 }, "GradScaler: growth_interval must be a positive integer, got 2.5")
      bad({ enabled = 1 }, "GradScaler: enabled must be a boolean, got 1")
      bad({ scale = 2 }, "GradScaler: unknown option 'scale'")
      bad(5, "GradScaler: argument 1 must be a device (\"cuda\" or \"cpu\") or an options table, got number")
      assert.has_error(function() GradScaler("cuda", 5) end, "GradScaler: options must be a table, got number")
      assert.has_error(function() GradScaler("tpu") end, "GradScaler: device must be \"cuda\" or \"cpu\", got 'tpu'")
      local sc = GradScaler()
      assert.has_error(function() sc:set_growth_factor(0.5) end,
        "GradScaler: set_growth_factor: growth_factor must be a finite number > 1, got 0.5")
      assert.has_error(function() sc:set_backoff_factor(2) end,
        "GradScaler: set_backoff_factor: backoff_factor must be a number in (0, 1), got 2")
      assert.has_error(function() sc:set_growth_interval(-3) end,
        "GradScaler: set_growth_interval: growth_interval must be a positive integer, got -3")
      sc:set_growth_interval(5)
      assert.equals(5, sc:get_growth_interval())
    end)

    it("rejects what is not a tensor or an optimizer", function()
      local sc = ready_scaler()
      assert.has_error(function() sc:scale(3) end,
        "GradScaler: scale: expects a tensor or a table of tensors, got number")
      assert.has_error(function() sc:scale({ tide.ones(1), "x" }) end,
        "GradScaler: scale: expects a tensor or a table of tensors, got string")
      assert.has_error(function() sc:step({}) end, "GradScaler: step: expects an optimizer, got table")
      assert.has_error(function() sc:step(tide.ones(1)) end, "GradScaler: step: expects an optimizer, got a tensor")
      assert.has_error(function() sc:unscale_(nil) end, "GradScaler: unscale_: expects an optimizer, got nil")
      assert.has_error(function() GradScaler({ enabled = false }):step(7) end,
        "GradScaler: step: expects an optimizer, got number")
    end)

    it("enforces the order scale, unscale_, step, update", function()
      local p, opt = param({ 1 })
      set_grad(p, { 1 })
      local sc = GradScaler()
      assert.has_error(function() sc:unscale_(opt) end,
        "GradScaler: unscale_: there is no scale yet; call scaler:scale(loss) earlier in the iteration")
      assert.has_error(function() sc:step(opt) end,
        "GradScaler: step: there is no scale yet; call scaler:scale(loss) earlier in the iteration")
      sc:scale(tide.ones(1))
      assert.has_error(function() sc:update() end,
        "GradScaler: update: no inf checks were recorded before update(); call step(opt) or unscale_(opt) first")
      sc:unscale_(opt)
      assert.has_error(function() sc:unscale_(opt) end,
        "GradScaler: unscale_() has already been called on this optimizer since the last update()")
      sc:step(opt)
      assert.has_error(function() sc:step(opt) end,
        "GradScaler: step() has already been called since the last update()")
      assert.has_error(function() sc:unscale_(opt) end, "GradScaler: unscale_() is being called after step()")
      sc:update()
      sc:unscale_(opt)   -- a new iteration
      assert.has_error(function() sc:step(opt, function() end) end,
        "GradScaler: step: a closure is not supported while the scaler is enabled: its gradients would stay scaled")
      local q, empty = param({ 1 })
      assert.is_nil(q.grad)
      assert.has_error(function() sc:step(empty) end,
        "GradScaler: step: no inf checks were recorded for this optimizer: none of its parameters has a gradient")
    end)

    it("rejects a bad new_scale and a bad state dict", function()
      local sc = ready_scaler()
      assert.has_error(function() sc:update(0) end,
        "GradScaler: update: new_scale must be a positive finite number, got 0")
      assert.has_error(function() sc:update(tide.ones(2)) end,
        "GradScaler: update: new_scale must be a number or a one-element tensor that does not require grad, " ..
        "got a tensor of shape [2]")
      assert.has_error(function() sc:update(tide.ones(1, { requires_grad = true })) end,
        "GradScaler: update: new_scale must be a number or a one-element tensor that does not require grad, " ..
        "got a tensor of shape [1] that requires grad")
      assert.has_error(function() sc:update("x") end,
        "GradScaler: update: new_scale must be a number or a one-element tensor that does not require grad, got 'x'")
      assert.has_error(function() sc:load_state_dict({}) end,
        "GradScaler: load_state_dict: the state dict is empty, possibly because it was saved from a disabled " ..
        "GradScaler")
      assert.has_error(function() sc:load_state_dict(3) end, "GradScaler: load_state_dict: expects a table, got number")
      local sd = sc:state_dict()
      sd._growth_tracker = nil
      assert.has_error(function() sc:load_state_dict(sd) end,
        "GradScaler: load_state_dict: the state dict lacks '_growth_tracker'")
      sd._growth_tracker, sd.backoff_factor = 0, 3
      assert.has_error(function() sc:load_state_dict(sd) end,
        "GradScaler: load_state_dict: backoff_factor must be a number in (0, 1), got 3")
      assert.equals(0.5, sc:get_backoff_factor())   -- nothing changed
    end)
  end)
end)
