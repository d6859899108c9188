-- autograd.Function (backwards written in Lua) and utils.checkpoint: gradients
-- against hand-computed values and finite differences, the ctx API, the errors
-- of misuse, create_graph through a custom backward, nested backwards, capture
-- by tide.jit.compile, the memory checkpointing saves, and that a training loop
-- of custom functions keeps nothing.
local tide = require "tide"
local H = require "spec.helpers"

local grad, Function = tide.autograd.grad, tide.autograd.Function
local checkpoint = tide.utils.checkpoint

local function leaf(vals) return tide.tensor(vals, "float64"):requires_grad_() end
local function map(t, f)
  local r = {}
  for i, v in ipairs(t) do r[i] = f(v, i) end
  return r
end
local function raises(f, text)
  local ok, err = pcall(f)
  assert.is_false(ok, "expected an error containing: " .. text)
  assert.matches(text, tostring(err), 1, true)
  return err
end

local Exp = Function("Exp")
function Exp.forward(ctx, x)
  local y = x:exp()
  ctx:save_for_backward(y)
  return y
end
function Exp.backward(ctx, gy) return gy * ctx.saved_tensors[1] end

local Cube = Function("Cube", {
  forward = function(ctx, x) ctx:save_for_backward(x); return x * x * x end,
  backward = function(ctx, g) local x = ctx.saved_tensors[1]; return g * 3 * x * x end,
})

local xs = { -1.2, -0.3, 0.4, 1.1 }

describe("autograd.Function", function()
  it("computes forward values and hand-computed gradients", function()
    local x = leaf(xs)
    local y = Exp(x)
    H.close(y, map(xs, math.exp), 1e-15, 0)
    assert.is_true(y.requires_grad)
    assert.equals("Exp", y.grad_fn)
    local loss = (y * tide.tensor({ 1, 2, 3, 4 }, "float64")):sum()
    loss:backward()
    H.close(x.grad, map(xs, function(v, i) return i * math.exp(v) end), 1e-14, 0)
    local z = leaf(xs)
    Cube.apply(z):sum():backward()
    H.close(z.grad, map(xs, function(v) return 3 * v * v end), 1e-14, 0)
  end)

  it("passes gradients through a chain and agrees with gradcheck", function()
    assert.is_true(tide.autograd.gradcheck(function(a, b) return Cube(Exp(a) * b):sin() end,
      { leaf(xs), leaf { 0.5, -0.7, 0.9, 0.2 } }))
  end)

  it("takes non-tensor arguments, and gives needs_input_grad per argument", function()
    local seen
    local Scale = Function("Scale")
    function Scale.forward(ctx, x, k, y, opts)
      seen = { ctx.needs_input_grad[1], ctx.needs_input_grad[2], ctx.needs_input_grad[3], ctx.needs_input_grad[4] }
      ctx.k = k * opts.mult
      ctx:save_for_backward(y)
      return x * ctx.k + y * y
    end
    function Scale.backward(ctx, g)
      local y = ctx.saved_tensors[1]
      return g * ctx.k, nil, g * 2 * y, nil
    end
    local x, y = leaf { 1, 2 }, tide.tensor({ 3, 4 }, "float64")
    local out = Scale(x, 3, y, { mult = 2 })
    assert.same({ true, false, false, false }, seen)
    H.close(out, { 1 * 6 + 9, 2 * 6 + 16 }, 0, 0)
    out:sum():backward()
    H.close(x.grad, { 6, 6 }, 0, 0)
    local y2 = leaf { 3, 4 }
    Scale(x:detach(), 3, y2, { mult = 1 }):sum():backward()
    H.close(y2.grad, { 6, 8 }, 0, 0)
  end)

  it("sums a broadcast gradient back to its input's shape", function()
    local AddRow = Function("AddRow")
    function AddRow.forward(_, m, row) return m + row end
    function AddRow.backward(_, g) return g, g end   -- g is [2,3]; row is [3]
    local m = tide.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, "float64"):requires_grad_()
    local row = leaf { 1, 1, 1 }
    local w = tide.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, "float64")
    local loss = (AddRow(m, row) * w):sum()
    loss:backward()
    H.close(row.grad, { 5, 7, 9 }, 0, 0)
    H.close(m.grad, { { 1, 2, 3 }, { 4, 5, 6 } }, 0, 0)
  end)

  it("gives zeros for unused and non-differentiable outputs, or nil without materialize", function()
    local got = {}
    local Split = Function("Split")
    function Split.forward(ctx, x, materialize)
      ctx:set_materialize_grads(materialize)
      local idx = x:argmax()
      local half = x * 0.5
      ctx:mark_non_differentiable(half)
      return x * 2, x * 3, idx, half, "label"
    end
    function Split.backward(_, ga, gb, gi, gh, gl)
      got = { ga, gb, gi, gh, gl }
      return (ga or 0) * 2 + (gb ~= nil and gb * 3 or 0)
    end
    local x = leaf { 1, 5, 2 }
    local a, b, idx, half, label = Split(x, true)
    assert.equals("label", label)
    assert.is_false(half.requires_grad)
    assert.is_false(idx.requires_grad)
    assert.equals("int64", idx:dtype())
    a:sum():backward()
    H.close(x.grad, { 2, 2, 2 }, 0, 0)
    H.close(got[2], { 0, 0, 0 }, 0, 0)
    H.close(got[3], 0, 0, 0)
    H.close(got[4], { 0, 0, 0 }, 0, 0)
    assert.is_nil(got[5])
    local x2 = leaf { 1, 5, 2 }
    local a2 = Split(x2, false)
    a2:sum():backward()
    assert.is_nil(got[2])
    assert.is_nil(got[4])
    H.close(x2.grad, { 2, 2, 2 }, 0, 0)
  end)

  it("records nothing when no argument requires grad, or in no_grad", function()
    local calls = 0
    local F = Function("F", { forward = function(_, x) calls = calls + 1; return x * 2 end,
                              backward = function(_, g) return g * 2 end })
    local y = F(tide.tensor({ 1, 2 }, "float64"))
    assert.is_false(y.requires_grad)
    local z = tide.no_grad(function() return F(leaf { 1, 2 }) end)
    assert.is_false(z.requires_grad)
    assert.equals(2, calls)
  end)

  it("gives second derivatives with create_graph, through saved inputs and saved outputs", function()
    local x = leaf(xs)
    local g = grad(Cube(x):sum(), x, nil, { create_graph = true })
    assert.is_true(g.requires_grad)
    H.close(grad(g:sum(), x), map(xs, function(v) return 6 * v end), 1e-14, 0)
    local x2 = leaf(xs)
    local g2 = grad(Exp(x2):sum(), x2, nil, { create_graph = true })
    H.close(grad(g2:sum(), x2), map(xs, math.exp), 1e-14, 0)
    local x3 = leaf(xs)   -- third derivative of x^3 through two custom backwards
    local d1 = grad(Cube(x3):sum(), x3, nil, { create_graph = true })
    local d2 = grad(d1:sum(), x3, nil, { create_graph = true })
    H.close(grad(d2:sum(), x3), { 6, 6, 6, 6 }, 1e-14, 0)
  end)

  it("runs with hooks on its outputs and inputs", function()
    local x = leaf { 1, 2 }
    local y = Cube(x)
    y:register_hook(function(g) return g * 10 end)
    x:register_hook(function(g) return g + 1 end)
    y:sum():backward()
    H.close(x.grad, { 31, 121 }, 0, 0)
  end)

  it("frees its saved tensors after backward unless retain_graph is set", function()
    local x = leaf { 1, 2 }
    local y = Cube(x):sum()
    y:backward({ retain_graph = true })
    y:backward()
    H.close(x.grad, { 6, 24 }, 0, 0)
    raises(function() y:backward() end, "backward of 'Cube': its saved tensors were freed by an earlier backward")
  end)

  it("refuses a saved tensor written in place after it was saved", function()
    local x = leaf { 1, 2 }
    local y = Exp(x)
    y:mul_(2)
    raises(function() y:sum():backward() end,
      "backward of 'Exp': saved tensor 1 (shape [2]) was modified in place after it was saved")
  end)

  it("names the function and the values when backward misbehaves", function()
    local function make(name, back)
      return Function(name, { forward = function(_, x, y) return x * (y or 1) end, backward = back })
    end
    local x = leaf { 1, 2, 3 }
    raises(function() make("WrongShape", function(_, g) return g:narrow(1, 1, 2) end)(x):sum():backward() end,
      "backward of 'WrongShape': the gradient of input 1 has shape [2], but the input has shape [3]")
    raises(function() make("IntGrad", function() return tide.tensor({ 1, 2, 3 }, "int64") end)(x):sum():backward() end,
      "backward of 'IntGrad': the gradient of input 1 has dtype int64")
    raises(function() make("NotTensor", function() return "oops" end)(x):sum():backward() end,
      "backward of 'NotTensor': the gradient of argument 1 must be a tensor or nil, got string")
    raises(function() make("TooMany", function(_, g) return g, nil, g end)(x):sum():backward() end,
      "backward of 'TooMany' returned 3 values, but forward took 1 arguments")
    raises(function() make("Boom", function() error("bad things") end)(x):sum():backward() end,
      "backward of 'Boom' raised an error: ")
    raises(function() make("Missing", nil)(x):sum():backward() end, "backward of 'Missing': backward is not defined")
    raises(function() Function("NoForward")(x) end, "NoForward: forward is not defined")
    raises(function() Function(3) end, "autograd.Function: argument 1 must be the function's name")
    raises(function() Function("Bad", 3) end, "autograd.Function: argument 2 must be a table")
    local ctx_err = Function("SaveBad", { forward = function(ctx, a) ctx:save_for_backward(a, 3); return a end })
    raises(function() ctx_err(x) end, "save_for_backward: argument 2 must be a tensor or nil, got number")
    local many = Function("Many", { forward = function(_, ...) return (...) * 1 end })
    local ins = {}
    for i = 1, 9 do ins[i] = leaf { i } end
    raises(function() many(unpack(ins)) end, "Many: at most 8 tensor arguments that require grad, got 9")
    -- tensors that need no gradient do not count: 8 leaves and 4 constants, interleaved
    local Wide = Function("Wide")
    local needs
    function Wide.forward(ctx, ...)
      needs = ctx.needs_input_grad
      local acc = tide.zeros(1)
      for i = 1, select("#", ...) do acc = acc + select(i, ...) * i end
      return acc
    end
    function Wide.backward(_, gy)
      local g = {}
      for i = 1, 12 do g[i] = gy * i end   -- the constants' are dropped
      return unpack(g, 1, 12)
    end
    local args = {}
    for i = 1, 12 do args[i] = i % 3 == 0 and tide.tensor({ i }) or leaf { i } end
    local extra = leaf { 1 }   -- 9 leaves in all: one too many
    raises(function() Wide(extra, unpack(args, 1, 12)) end, "Wide: at most 8 tensor arguments that require grad, got 9")
    Wide(unpack(args, 1, 12)):sum():backward()
    for i = 1, 12 do
      assert.are.equal(i % 3 ~= 0, needs[i], "needs_input_grad " .. i)
      if i % 3 ~= 0 then H.close(args[i].grad, { i }, 0, 0) end
    end

    -- the walk still works after the errors
    local z = leaf { 1, 2 }
    Cube(z):sum():backward()
    H.close(z.grad, { 3, 12 }, 0, 0)
  end)

  it("allows a backward of a graph of its own inside backward, and refuses one into the outer graph", function()
    local Inner = Function("Inner")
    function Inner.forward(ctx, x) ctx:save_for_backward(x); return x:sin() end
    function Inner.backward(ctx, g)   -- backward runs with grad mode off, as in PyTorch
      local x = ctx.saved_tensors[1]:detach():requires_grad_()
      return g * tide.enable_grad(function() return tide.autograd.grad(x:sin():sum(), x) end)   -- cos(x)
    end
    local x = leaf(xs)
    Inner(x * 2):sum():backward()
    H.close(x.grad, map(xs, function(v) return 2 * math.cos(2 * v) end), 1e-14, 0)
    local outer = leaf { 1, 2 }
    local h = outer * 3
    local Reach = Function("Reach")
    function Reach.forward(_, x) return x * 1 end
    function Reach.backward(_, g)
      return g * tide.enable_grad(function() return tide.autograd.grad(h:sum(), outer) end)
    end
    raises(function() Reach(h):sum():backward() end,
      "a backward run inside the backward of 'Reach' reaches 'mul', a node of the graph being walked")
  end)

  it("is captured by tide.jit.compile: replays give the eager gradients", function()
    local w = tide.tensor({ 0.5, -1, 2 }, "float64"):requires_grad_()
    local step = tide.jit.compile(function(x)
      w.grad = nil
      local l = Cube(w * x):sum()
      l:backward()
      return l, w.grad
    end)
    for i = 1, 4 do
      local x = tide.tensor({ i, 1, 0.5 }, "float64")
      local l, g = step(x)
      local wx = map({ 0.5, -1, 2 }, function(v, k) return v * ({ i, 1, 0.5 })[k] end)
      H.close(l, wx[1] ^ 3 + wx[2] ^ 3 + wx[3] ^ 3, 1e-14, 0)
      H.close(g, map(wx, function(v, k) return 3 * v * v * ({ i, 1, 0.5 })[k] end), 1e-14, 0)
    end
  end)

  it("keeps nothing once its outputs are gone, in a long loop", function()
    local w = leaf { 0.1, 0.2 }
    local function live()
      collectgarbage()
      collectgarbage()
      return tide.autograd._live_functions()
    end
    for _ = 1, 20 do Cube(w):sum():backward() end
    local before = live()
    for _ = 1, 500 do Cube(Exp(w)):sum():backward() end
    assert.is_true(live() <= before + 2, "live calls grew from " .. before .. " to " .. live())
  end)
end)

describe("tide.get_rng_state / set_rng_state", function()
  it("takes the generator back so the same numbers are drawn", function()
    tide.manual_seed(3)
    tide.rand(5)
    local s = tide.get_rng_state()
    assert.equals("int64", s:dtype())
    local a = tide.rand(7)
    local b = tide.randn({ 2, 2 })
    tide.set_rng_state(s)
    H.equal(tide.rand(7), a)
    H.equal(tide.randn({ 2, 2 }), b)
    raises(function() tide.set_rng_state(tide.zeros(3)) end,
      "set_rng_state: expects the int64 tensor of 2 elements get_rng_state gives, got float32 of shape [3]")
  end)
end)

describe("utils.checkpoint", function()
  local nn = tide.nn

  local function model_grads(model, run)
    model:zero_grad()
    tide.manual_seed(11)
    local y = run()
    local loss = (y * y):sum()
    loss:backward()
    local r = {}
    for i, p in ipairs(model:parameters()) do r[i] = p.grad:clone() end
    return y, r
  end

  it("gives the values and gradients of the plain run, dropout included", function()
    tide.manual_seed(1)
    local model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Dropout(0.5), nn.Linear(8, 3))
    model:double()
    local x = tide.randn({ 5, 4 }, { dtype = "float64" })
    local y0, g0 = model_grads(model, function() return model(x) end)
    local y1, g1 = model_grads(model, function() return checkpoint.checkpoint(model, x) end)
    local y2, g2 = model_grads(model, function() return checkpoint.checkpoint_sequential(model, 2, x) end)
    H.close(y1, y0, 0, 0)
    H.close(y2, y0, 0, 0)
    for i = 1, #g0 do
      H.close(g1[i], g0[i], 1e-14, 1e-15, "parameter " .. i)
      H.close(g2[i], g0[i], 1e-14, 1e-15, "parameter " .. i)
    end
    -- the recomputation draws other numbers when told not to replay them: dropout masks differ
    local _, g3 = model_grads(model, function()
      return checkpoint.checkpoint({ fn = model, preserve_rng_state = false }, x)
    end)
    local same = true
    for i = 1, #g0 do same = same and (g3[i] - g0[i]):abs():max():item() < 1e-12 end
    assert.is_false(same)
  end)

  it("differentiates through its tensor arguments and leaves others alone", function()
    local x = leaf(xs)
    local y = checkpoint.checkpoint(function(a, k, b) return (a * k):sin() * b end, x, 2, tide.tensor(xs, "float64"))
    y:sum():backward()
    H.close(x.grad, map(xs, function(v) return 2 * math.cos(2 * v) * v end), 1e-14, 0)
  end)

  it("keeps fewer tensors alive than the plain run", function()
    local x = tide.randn({ 256, 1024 }, { device = "cpu" }):requires_grad_()
    local function chain(a)
      for _ = 1, 12 do a = (a * 1.01):tanh() end
      return a
    end
    local function held(run)
      collectgarbage(); collectgarbage(); tide.sync()
      local before = tide.memory_stats().in_use
      local y = run()
      collectgarbage(); collectgarbage(); tide.sync()   -- the intermediates' wrappers, not what backward keeps
      local after = tide.memory_stats().in_use
      y:sum():backward()
      return (after - before) / (256 * 1024 * 4)   -- in tensors of x's size
    end
    local plain = held(function() return chain(x) end)
    local ck = held(function() return checkpoint.checkpoint(chain, x) end)
    assert.is_true(plain >= 12, "the plain run holds " .. plain .. " activations")
    assert.is_true(ck <= 2, "the checkpointed run holds " .. ck .. " activations")
  end)

  it("refuses what it cannot do, with the reason", function()
    local x = leaf { 1, 2 }
    raises(function() checkpoint.checkpoint(3, x) end, "checkpoint: argument 1 must be a function or a module")
    local y = checkpoint.checkpoint(function(a) return a * a end, x)
    raises(function() grad(y:sum(), x) end, "checkpoint: autograd.grad through a checkpointed function")
    local y2 = checkpoint.checkpoint(function(a) return a * a end, x)
    raises(function() grad(y2:sum(), x, nil, { create_graph = true }) end,
      "checkpoint: its result cannot be differentiated with create_graph")
    raises(function() checkpoint.checkpoint_sequential({}, 2, x) end, "checkpoint_sequential: argument 1 must be")
    raises(function() checkpoint.checkpoint_sequential({ function(a) return a end }, 0, x) end,
      "checkpoint_sequential: segments must be a positive integer")
  end)

  it("replays its dropout masks in the recomputation of a compiled step", function()
    local w = tide.tensor({ 0.5, -1, 2, 1, 3, 1.5 }, "float64"):requires_grad_()
    local step = tide.jit.compile(function(x)
      w.grad = nil
      local y = checkpoint.checkpoint(function(a) return nn.functional.dropout(a * w, 0.5, true) end, x)
      y:sum():backward()
      return y, w.grad
    end)
    local masks = {}
    for i = 1, 6 do
      local x = tide.tensor({ i, 1, 0.5, 2, 3, 4 }, "float64")
      local y, g = step(x)
      local kept = y:ne(0):double()
      H.close(g, kept * x * 2, 0, 0, "replay " .. i)   -- the gradient's mask is the forward's
      masks[i] = table.concat(H.flat(kept:totable()), ",")
    end
    local differ = false
    for i = 2, 6 do differ = differ or masks[i] ~= masks[1] end
    assert.is_true(differ, "every replay drew the same mask")
  end)

  it("is captured by tide.jit.compile when fn draws no random numbers", function()
    local w = tide.tensor({ 0.5, -1, 2 }, "float64"):requires_grad_()
    local step = tide.jit.compile(function(x)
      w.grad = nil
      checkpoint.checkpoint(function(a) return (a * w):tanh() end, x):sum():backward()
      return w.grad
    end)
    for i = 1, 4 do
      local xv = { i, 1, 0.5 }
      H.close(step(tide.tensor(xv, "float64")), map(xv, function(v, k)
        local t = math.tanh(v * ({ 0.5, -1, 2 })[k])
        return (1 - t * t) * v
      end), 1e-14, 0)
    end
  end)
end)
