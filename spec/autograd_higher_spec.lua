-- autograd beyond first derivatives: create_graph (second derivatives against
-- hand-computed values, Hessian-vector products, gradient penalties checked by
-- finite differences), retain_grad on non-leaves, and gradient hooks.
local tide = require "tide"
local H = require "spec.helpers"

local grad, gradcheck = tide.autograd.grad, tide.autograd.gradcheck

local function leaf(vals, shape)
  local t = tide.tensor(vals, "float64")
  if shape then t = t:reshape(shape) end
  return t:requires_grad_()
end
local function map(t, f)
  local r = {}
  for i, v in ipairs(t) do r[i] = f(v, i) end
  return r
end
local xs = { -1.3, -0.4, 0.2, 0.7, 1.6 }

describe("autograd create_graph", function()
  it("gives second derivatives of elementwise functions", function()
    local cases = {
      { function(x) return x * x * x end, function(v) return 6 * v end },
      { function(x) return x:pow(3) end, function(v) return 6 * v end },
      { function(x) return x:exp() end, function(v) return math.exp(v) end },
      { function(x) return x:sin() end, function(v) return -math.sin(v) end },
      { function(x) return x:tanh() end,
        function(v) local t = math.tanh(v); return -2 * t * (1 - t * t) end },
      { function(x) return x:sigmoid() end,
        function(v) local s = 1 / (1 + math.exp(-v)); return s * (1 - s) * (1 - 2 * s) end },
      { function(x) return (x * 2):exp() / 4 end, function(v) return math.exp(2 * v) end },
    }
    for k, case in ipairs(cases) do
      local x = leaf(xs)
      local g = grad(case[1](x):sum(), x, nil, { create_graph = true })
      assert.is_true(g.requires_grad, "case " .. k)
      H.close(grad(g:sum(), x), map(xs, case[2]), 1e-10, 1e-12, "case " .. k)
    end
  end)

  it("goes through slices, selects and reshapes", function()
    local x = leaf({ 1, 2, 3, 4, 5, 6 }, { 2, 3 })
    local f = (x[2] ^ 3):sum() + (x:narrow(2, 1, 2):reshape(4) ^ 2):sum() + (x[{ {}, { 2, 3 } }] ^ 3):sum()
    local g = grad(f, x, nil, { create_graph = true })
    H.close(g, { { 2, 4 + 12, 27 }, { 48 + 8, 75 + 10 + 75, 108 + 108 } })
    -- d/dx of sum(g): 6x (select row 2) + 2 (narrowed columns 1, 2) + 6x (columns 2, 3)
    H.close(grad(g:sum(), x), { { 2, 2 + 12, 18 }, { 24 + 2, 30 + 2 + 30, 36 + 36 } })
  end)

  it("t:backward{create_graph = true} leaves gradients that require grad", function()
    local x = leaf(xs)
    ;(x ^ 3):sum():backward({ create_graph = true })
    local g = x.grad
    assert.is_true(g.requires_grad)
    H.close(g, map(xs, function(v) return 3 * v * v end), 1e-12)
    x.grad = nil
    g:sum():backward()
    H.close(x.grad, map(xs, function(v) return 6 * v end), 1e-12)
    assert.is_false(x.grad.requires_grad)
  end)

  it("accumulates a second create_graph backward out of place, with history", function()
    local x = leaf(xs)
    ;(x ^ 3):sum():backward({ create_graph = true })
    local first = x.grad
    ;(x ^ 2):sum():backward({ create_graph = true })
    H.close(first, map(xs, function(v) return 3 * v * v end), 1e-12)   -- not written into
    H.close(grad(x.grad:sum(), x), map(xs, function(v) return 6 * v + 2 end), 1e-12)
  end)

  it("gives Hessian-vector products of a quadratic form through matmul", function()
    local A = tide.tensor({ { 2, 1, 0 }, { 1, 3, -1 }, { 0, -1, 4 } }, "float64")
    local x = leaf { 0.5, -1, 2 }
    local v = tide.tensor({ 1, 2, -1 }, "float64")
    local f = x:reshape({ 1, 3 }):matmul(A):matmul(x:reshape { 3, 1 }):sum() * 0.5
    local g = grad(f, x, nil, { create_graph = true })
    H.close(g, A:matmul(x:detach()):totable(), 1e-12)
    H.close(grad((g * v):sum(), x), { 4, 8, -6 }, 1e-12)   -- A v
  end)

  it("gives the Hessian of softmax cross entropy: diag(p) - p p^T", function()
    local zs, y = { 0.3, -1.2, 2.0, 0.5 }, 3
    local z = leaf(zs)
    local onehot = tide.tensor({ 0, 0, 1, 0 }, "float64")
    local loss = -(z:log_softmax(1) * onehot):sum()
    local g = grad(loss, z, nil, { create_graph = true })
    local e, s = map(zs, math.exp), 0
    for _, v in ipairs(e) do s = s + v end
    local p = map(e, function(v) return v / s end)
    H.close(g, map(p, function(pi, i) return pi - (i == y and 1 or 0) end), 1e-12)
    local vs = { 1, -2, 0.5, 3 }
    local pv = 0
    for i = 1, 4 do pv = pv + p[i] * vs[i] end
    local hv = grad((g * tide.tensor(vs, "float64")):sum(), z)
    H.close(hv, map(p, function(pi, i) return pi * vs[i] - pi * pv end), 1e-12)
    -- the same through softmax and log
    local z2 = leaf(zs)
    local g2 = grad(-(z2:softmax(1):log() * onehot):sum(), z2, nil, { create_graph = true })
    H.close(grad((g2 * tide.tensor(vs, "float64")):sum(), z2), hv:totable(), 1e-10)
  end)

  it("backpropagates a gradient penalty ||dL/dx||^2 to the parameters (gradcheck)", function()
    local x = leaf({ 0.3, -0.8, 1.1, 0.4, -0.2, 0.9 }, { 2, 3 })
    local w = leaf({ 0.2, -0.5, 0.7, 0.1, -0.3, 0.6 }, { 3, 2 })
    local b = leaf { 0.1, -0.2 }
    local function penalty(x_, w_, b_)
      local logits = (x_:matmul(w_) + b_):tanh()
      local onehot = tide.tensor({ { 0, 1 }, { 1, 0 } }, "float64")
      local loss = -(logits:log_softmax(2) * onehot):sum() + (logits * logits):mean()
      local gx = grad(loss, x_, nil, { create_graph = true })
      return (gx * gx):sum()
    end
    assert.is_true(gradcheck(penalty, { x, w, b }))
  end)

  it("leaves gradients without history when create_graph is not asked for", function()
    local x = leaf(xs)
    local g = grad((x ^ 3):sum(), x)
    assert.is_false(g.requires_grad)
    assert.is_nil(g.grad_fn)
    ;(x ^ 3):sum():backward()
    assert.is_false(x.grad.requires_grad)
  end)

  it("retains the graph by default with create_graph, as PyTorch does", function()
    local x = leaf(xs)
    local f = (x:exp()):sum()
    grad(f, x, nil, { create_graph = true })
    H.close(grad(f, x), map(xs, math.exp), 1e-12)
  end)

  it("differentiates gelu's backward op, exact and tanh forms", function()
    local x = leaf(xs)
    local g = grad(x:gelu():sum(), x, nil, { create_graph = true })
    H.close(grad(g:sum(), x), map(xs, function(v)   -- phi(x) (2 - x^2)
      return math.exp(-v * v / 2) / math.sqrt(2 * math.pi) * (2 - v * v)
    end), 1e-10, 1e-12)
    for _, form in ipairs { "none", "tanh" } do
      assert.is_true(gradcheck(function(a, w)
        return grad((a:gelu(form) * w):sum(), a, nil, { create_graph = true }) * w
      end, { leaf(xs), leaf { 0.5, -1, 2, 1.5, -0.3 } }))
    end
  end)

  it("differentiates conv2d's and the average pools' backward ops: a gradient penalty through a conv net", function()
    local F = tide.nn.functional
    tide.manual_seed(3)
    local x = tide.randn(1, 2, 5, 5):double():requires_grad_()
    local w = tide.randn(4, 1, 3, 2):double():requires_grad_()
    local b = tide.randn(4):double():requires_grad_()
    local proj = tide.randn(1, 4, 1, 2):double()
    assert.is_true(gradcheck(function(x_, w_, b_)
      local y = F.conv2d(x_, w_, b_, { stride = { 2, 1 }, padding = { 1, 0 }, dilation = { 1, 2 }, groups = 2 })
      y = F.adaptive_avg_pool2d(F.avg_pool2d(y:tanh(), 2, { stride = 1 }), { 1, 2 })
      local gx = grad((y * proj):sum(), x_, nil, { create_graph = true })
      return (gx * gx):sum()
    end, { x, w, b }))
    -- MAML's case: the weight's gradient, differentiated again
    assert.is_true(gradcheck(function(x_, w_)
      local y = F.conv2d(x_, w_, nil, { stride = 2, padding = 1, groups = 2 })
      local gw = grad((y:sin() * y):sum(), w_, nil, { create_graph = true })
      return (gw * gw):sum()
    end, { x, w }))
  end)

  it("differentiates max pooling twice (a gradient penalty through a max pool)", function()
    local x = leaf({ 1, 5, 2, 4, 3, 0, 7, 6, 8, 2.5, -1, 9 }, { 1, 1, 3, 4 })
    local F = tide.nn.functional
    -- d/dx of sum(pool(x)^2) is 2 pool(x) at each maximum's place; its square's sum
    -- differentiated again is 8 pool(x) there, times the times that element won
    local g = grad((F.max_pool2d(x, 2, { stride = 1 }) ^ 2):sum(), x, nil, { create_graph = true })
    assert.is_true(g.requires_grad)
    local gg = grad((g * g):sum(), x)
    local y = F.max_pool2d(x:detach(), 2, { stride = 1 }):reshape(-1):totable()
    local _, idx = F.max_pool2d(x:detach(), 2, { stride = 1, return_indices = true })
    local count, want = {}, {}
    for _, i in ipairs(idx:reshape(-1):totable()) do count[i] = (count[i] or 0) + 1 end
    local xs = x:detach():reshape(-1):totable()
    for k = 1, 12 do want[k] = count[k] and 8 * count[k] ^ 2 * xs[k] or 0 end
    H.close(gg:reshape(-1), want, 1e-12)
    assert.are.equal(6, #y)
    -- and in general, with padding and ceil_mode windows
    local z = tide.randn(1, 2, 5, 5, { dtype = "float64" }):requires_grad_()
    assert.is_true(gradcheck(function(a)
      local gz = grad((F.max_pool2d(a, 3, { stride = 2, padding = 1, ceil_mode = true }):sin()):sum(), a, nil,
        { create_graph = true })
      return (gz * gz):sum()
    end, { z }))
  end)

  it("is refused inside tide.jit.compile", function()
    local x = leaf(xs)
    local f = tide.jit.compile(function(a) return grad((a * a):sum(), a, nil, { create_graph = true }) end)
    local ok, err = pcall(function() for _ = 1, 3 do f(x) end end)
    assert.is_false(ok)
    assert.matches("grad: create_graph is not supported inside tide.jit.compile", err, 1, true)
  end)
end)

describe("autograd retain_grad", function()
  it("fills .grad of a non-leaf, accumulated across backward calls", function()
    local x = leaf { 1, 2, 3 }
    local h = x * 2
    assert.is_false(h.retains_grad)
    h:retain_grad()
    assert.is_true(h.retains_grad)
    local y = (h * h):sum()
    y:backward({ retain_graph = true })
    H.close(h.grad, { 4, 8, 12 })   -- 2h
    H.close(x.grad, { 8, 16, 24 })
    y:backward()
    H.close(h.grad, { 8, 16, 24 })
    assert.is_false(h.grad.requires_grad)
  end)

  it("leaves other non-leaves without .grad, and is a no-op on a leaf", function()
    local x = leaf { 1, 2 }
    x:retain_grad()
    assert.is_false(x.retains_grad)
    local a, b = x * 3, x + 1
    b:retain_grad()
    ;(a * b):sum():backward()
    assert.is_nil(a.grad)
    H.close(b.grad, { 3, 6 })
    H.close(x.grad, { 3 * 2 + 3, 3 * 3 + 6 })
  end)

  it("works for a root, a view, and an output of several uses", function()
    local x = leaf { 1, 2, 3, 4 }
    local v = x:view(2, 2)
    v:retain_grad()
    local s = (v:sum(1) * v:sum(2)):sum()
    s:retain_grad()
    s:backward()
    H.close(s.grad, 1)
    -- d/dv[i][j] of sum_k c_k r_k over column sums c = {4, 6} and row sums r = {3, 7}: r_j + c_i
    H.close(v.grad, { { 3 + 4, 7 + 4 }, { 3 + 6, 7 + 6 } })
  end)

  it("follows the tensor through an in-place op", function()
    local x = leaf { 1, 2 }
    local h = x * 1
    h:retain_grad()
    h:div_(2)
    ;(h * h):sum():backward()
    H.close(h.grad, { 1, 2 })   -- 2h of the new h (the old one's would be half that)
  end)

  it("is left alone by autograd.grad, which touches no .grad", function()
    local x = leaf { 1, 2 }
    local h = x * 2
    h:retain_grad()
    H.close(grad((h * h):sum(), x), { 8, 16 })
    assert.is_nil(h.grad)
  end)

  it("fails for a tensor that does not require grad", function()
    assert.has_error(function() tide.tensor { 1, 2 }:retain_grad() end,
      "retain_grad: the tensor does not require grad")
  end)

  it("is kept with create_graph as a gradient with history", function()
    local x = leaf { 1, 2 }
    local h = x * x
    h:retain_grad()
    ;(h * h):sum():backward({ create_graph = true })
    assert.is_true(h.grad.requires_grad)
    H.close(grad(h.grad:sum(), x), { 4, 8 })   -- h.grad = 2 x^2
  end)

  it("does not keep a dead tensor alive nor crash when it dies before backward", function()
    local x = leaf { 1, 2 }
    local y
    do
      local h = x * 2
      h:retain_grad()
      y = (h * h):sum()
    end
    collectgarbage()
    collectgarbage()
    y:backward()
    H.close(x.grad, { 8, 16 })
  end)
end)

describe("autograd hooks", function()
  it("calls a hook on a non-leaf with its gradient and uses what it returns", function()
    local x = leaf { 1, 2, 3 }
    local h = x * 2
    local seen
    h:register_hook(function(g) seen = g:clone(); return g * 10 end)
    ;(h * h):sum():backward()
    H.close(seen, { 4, 8, 12 })
    H.close(x.grad, { 80, 160, 240 })
  end)

  it("calls a leaf's hook once, on the sum over its uses, before .grad", function()
    local x = leaf { 1, 2 }
    local calls, seen = 0, nil
    x:register_hook(function(g) calls = calls + 1; seen = g:clone() end)
    ;(x * 3 + x * x):sum():backward()
    assert.are.equal(1, calls)
    H.close(seen, { 5, 7 })
    H.close(x.grad, { 5, 7 })
    x:register_hook(function(g) return g * 0 end)
    ;(x * 3):sum():backward()
    H.close(x.grad, { 5, 7 })   -- hooks run in order: the second zeroes what is added
    assert.are.equal(2, calls)
  end)

  it("runs for autograd.grad's inputs too, and before retain_grad", function()
    local x = leaf { 1, 2 }
    x:register_hook(function(g) return g + 1 end)
    H.close(grad((x * x):sum(), x), { 3, 5 })
    local h = x * 1
    h:retain_grad()
    h:register_hook(function(g) return g * 2 end)
    ;(h * 3):sum():backward()
    H.close(h.grad, { 6, 6 })
  end)

  it("is taken off by handle:remove()", function()
    local x = leaf { 1, 2 }
    local calls = 0
    local handle = x:register_hook(function() calls = calls + 1 end)
    x:sum():backward()
    handle:remove()
    handle:remove()
    x:sum():backward()
    assert.are.equal(1, calls)
    local h = x * 2
    local hh = h:register_hook(function(g) return g * 100 end)
    hh:remove()
    x.grad = nil
    h:sum():backward()
    H.close(x.grad, { 2, 2 })
  end)

  it("raises a hook's error from backward at the caller's line, and the next backward works", function()
    local x = leaf { 1, 2 }
    local h = x * 2
    h:register_hook(function() error("boom") end)
    local ok, err = pcall(function() (h * h):sum():backward() end)
    assert.is_false(ok)
    assert.matches("autograd_higher_spec.lua:%d+: backward: a gradient hook raised an error: .*boom", err)
    ;(x * x):sum():backward()
    H.close(x.grad, { 2, 4 })
  end)

  it("checks what a hook returns", function()
    local x = leaf { 1, 2 }
    local h = x * 2
    h:register_hook(function(g) return g:sum() end)
    assert.has_error(function() h:sum():backward() end,
      "backward: a gradient hook returned a gradient of shape [] for one of shape [2]")
    local h2 = x * 2
    h2:register_hook(function() return 5 end)
    assert.has_error(function() h2:sum():backward() end, "backward: a gradient hook must return a tensor or nil, got number")
    assert.has_error(function() tide.tensor { 1 }:register_hook(print) end,
      "register_hook: the tensor does not require grad, so no gradient flows into it")
  end)

  it("refuses a backward from inside a hook", function()
    local x = leaf { 1, 2 }
    local y = leaf { 3, 4 }
    local h = x * 2
    h:register_hook(function(g) (y * y):sum():backward() end)
    local ok, err = pcall(function() h:sum():backward() end)
    assert.is_false(ok)
    assert.matches("backward: called from inside a gradient hook", err, 1, true)
  end)

  it("runs on the calling thread with JIT-compiled code around it", function()
    local x = leaf { 1, 2 }
    local total = 0
    x:register_hook(function(g) total = total + g:sum():item() end)
    for _ = 1, 200 do (x * 2):sum():backward() end
    assert.are.equal(200 * 4, total)
  end)

  it("frees the functions of hooks whose tensors are gone", function()
    local count = 0
    local fns = setmetatable({}, { __mode = "k" })
    for _ = 1, 50 do
      local x = leaf { 1 }
      local f = function() end
      fns[f] = true
      x:register_hook(f)
      local h = x * 2
      h:register_hook(function() end)
    end
    collectgarbage()
    collectgarbage()
    tide.tensor({ 1 }, "float64"):requires_grad_():register_hook(function() end)   -- sweeps
    collectgarbage()
    for _ in pairs(fns) do count = count + 1 end
    assert.are.equal(0, count)
  end)

  it("is refused inside tide.jit.compile", function()
    local x = leaf { 1, 2 }
    x:register_hook(function(g) return g end)
    local f = tide.jit.compile(function(a) (a * a):sum():backward() return a.grad end)
    local ok, err = pcall(function() for _ = 1, 3 do f(x) end end)
    assert.is_false(ok)
    assert.matches("gradient hooks are not supported inside tide.jit.compile", err, 1, true)
  end)
end)
