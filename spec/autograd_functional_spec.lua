-- tide.autograd.functional: jacobian, hessian, vjp, jvp, hvp and vhp against
-- derivatives computed by hand and by float64 finite differences, the nesting
-- of their results, create_graph (a third derivative), strict mode, argument
-- errors, the caller's tensors left alone, and 0-d and empty tensors.
local tide = require "tide"
local H = require "spec.helpers"

local F = tide.autograd.functional
local grad = tide.autograd.grad

local function f64(vals, shape)
  local t = tide.tensor(vals, "float64")
  if shape then t = t:reshape(shape) end
  return t
end
local xs = { -1.3, -0.4, 0.2, 0.7, 1.6 }

-- A nested table n x n with f(i, j) as element i, j.
local function matrix(n, m, f)
  local r = {}
  for i = 1, n do
    r[i] = {}
    for j = 1, m do r[i][j] = f(i, j) end
  end
  return r
end
local function diag(vals) return matrix(#vals, #vals, function(i, j) return i == j and vals[i] or 0 end) end

-- The Jacobian of func (a tensor of inputs[k] to a list of tensors) with
-- respect to inputs[k], by central differences in float64, as a tensor of
-- shape output's ++ input's, for output `o`.
local function numeric_jacobian(func, inputs, o, k, eps)
  eps = eps or 1e-6
  local x = inputs[k]
  local n = x:numel()
  local function at(e, d)
    local ins = {}
    for i, t in ipairs(inputs) do ins[i] = t:detach():clone() end
    local flat = ins[k]:view(-1)
    tide.no_grad(function() flat[e] = flat[e] + d end)
    local r = func(unpack(ins))
    return (tide.is_tensor(r) and r or r[o]):detach():double()
  end
  local cols = {}
  for e = 1, n do cols[e] = ((at(e, eps) - at(e, -eps)) / (2 * eps)):reshape(-1) end
  local out = at(1, 0)
  local shape = out:shape()
  for _, s in ipairs(x:shape()) do shape[#shape + 1] = s end
  return tide.stack(cols, 2):reshape(shape)
end

-- Rosenbrock's function of n variables and its Hessian, written out by hand:
-- f = sum_i 100 (x[i+1] - x[i]^2)^2 + (1 - x[i])^2, i = 1 .. n-1.
local function rosenbrock(x)
  local n = x:shape()[1]
  local a, b = x:narrow(1, 1, n - 1), x:narrow(1, 2, n - 1)
  return ((b - a * a) ^ 2 * 100 + (1 - a) ^ 2):sum()
end
local function rosenbrock_hessian(v)
  local n = #v
  return matrix(n, n, function(i, j)
    if i == j then
      local h = i > 1 and 200 or 0
      if i < n then h = h + 2 - 400 * (v[i + 1] - v[i] ^ 2) + 800 * v[i] ^ 2 end
      return h
    elseif j == i + 1 then return -400 * v[i]
    elseif i == j + 1 then return -400 * v[j]
    end
    return 0
  end)
end
local rb_point = { 1.5, 0.5, -0.8, 1.2 }

describe("autograd.functional.jacobian", function()
  it("gives diag(3x^2) for x^3 elementwise", function()
    local J = F.jacobian(function(x) return x ^ 3 end, f64(xs))
    local d = {}
    for i, v in ipairs(xs) do d[i] = 3 * v * v end
    H.close(J, diag(d), 1e-12, 1e-14)
    assert.is_false(J.requires_grad)
  end)

  it("gives A for A x", function()
    local A = f64({ 2, -1, 0.5, 3, 0, -4 }, { 2, 3 })
    local J = F.jacobian(function(x) return A:matmul(x) end, f64 { 0.3, -2, 1 })
    H.close(J, A, 0, 0)
  end)

  it("gives diag(y + cos x) and diag(x) for x * y + sin(x), one per input", function()
    local x, y = f64 { 0.1, -0.7, 2 }, f64 { 1.5, 0.25, -3 }
    local J = F.jacobian(function(a, b) return a * b + a:sin() end, { x, y })
    assert.are.equal(2, #J)
    H.close(J[1], diag { 1.5 + math.cos(0.1), 0.25 + math.cos(-0.7), -3 + math.cos(2) }, 1e-12, 1e-14)
    H.close(J[2], diag { 0.1, -0.7, 2 }, 0, 0)
  end)

  it("gives diag(s) - s s^T for softmax", function()
    local x = f64 { 0.5, -1, 2, 0 }
    local s = x:softmax(1):totable()
    local J = F.jacobian(function(t) return t:softmax(1) end, x)
    H.close(J, matrix(4, 4, function(i, j) return (i == j and s[i] or 0) - s[i] * s[j] end), 1e-10, 1e-14)
  end)

  it("matches finite differences, for every output and input", function()
    local function f(x, y)
      return { x:matmul(y):tanh(), (x * x):sum() * y:select(1, 2) + y:exp():sum() }
    end
    local x, y = f64(H.values(6, -1, 1, 3), { 2, 3 }), f64(H.values(3, -1, 1, 5))
    local J = F.jacobian(f, { x, y })
    local shapes = { { { 2, 2, 3 }, { 2, 3 } }, { { 2, 3 }, { 3 } } }
    for o = 1, 2 do
      for k = 1, 2 do
        H.close(J[o][k], numeric_jacobian(f, { x, y }, o, k), 1e-6, 1e-8, "output " .. o .. ", input " .. k)
        assert.are.same(shapes[o][k], J[o][k]:shape())
      end
    end
  end)

  it("nests its result as the inputs and outputs come", function()
    local x = f64(H.values(4, -1, 1), { 2, 2 })
    local one = function(t) return t:exp() end
    local two = function(t) return { t:exp(), t:sum() } end
    assert.is_true(tide.is_tensor(F.jacobian(one, x)))
    assert.are.same({ 2, 2, 2, 2 }, F.jacobian(one, x):shape())
    local r = F.jacobian(one, { x })
    assert.are.equal(1, #r)
    assert.are.same({ 2, 2, 2, 2 }, r[1]:shape())
    r = F.jacobian(two, x)
    assert.are.equal(2, #r)
    assert.is_true(tide.is_tensor(r[1]) and tide.is_tensor(r[2]))
    assert.are.same({ 2, 2 }, r[2]:shape())
    r = F.jacobian(two, { x })
    assert.is_true(tide.is_tensor(r[1][1]) and tide.is_tensor(r[2][1]))
    H.close(r[2][1], tide.ones(2, 2, "float64"), 0, 0)
  end)

  it("gives zeros for an input the outputs do not depend on, and for outputs with no history", function()
    local x, y = f64 { 1, 2 }, f64 { 3, 4, 5 }
    local J = F.jacobian(function(a) return a * 2 end, { x, y })
    H.close(J[1], diag { 2, 2 }, 0, 0)
    H.close(J[2], tide.zeros(2, 3, "float64"), 0, 0)
    assert.are.equal(y:device(), J[2]:device())
    J = F.jacobian(function() return tide.ones(3, "float64") end, x)
    H.close(J, tide.zeros(3, 2, "float64"), 0, 0)
    assert.are.equal(x:device(), J:device())
  end)

  it("handles 0-d inputs and outputs", function()
    local x = f64(0.7):reshape({})
    H.close(F.jacobian(function(t) return t ^ 3 end, x), 3 * 0.49, 1e-12)
    H.close(F.jacobian(function(t) return (t ^ 2):sum() end, f64 { 1, -2 }), { 2, -4 }, 0, 0)
    H.close(F.jacobian(function(t) return f64 { 1, 2, 3 } * t end, x), { 1, 2, 3 }, 0, 0)
  end)

  it("handles empty inputs and outputs", function()
    local e = tide.zeros(0, "float64")
    assert.are.same({ 0, 0 }, F.jacobian(function(t) return t * 2 end, e):shape())
    H.close(F.jacobian(function(t) return t:sum() end, e), tide.zeros(0, "float64"))
    local J = F.jacobian(function(t) return t:narrow(1, 1, 0) end, f64 { 1, 2, 3 })
    assert.are.same({ 0, 3 }, J:shape())
  end)

  it("differentiates again with create_graph (a third derivative)", function()
    local x = f64(xs):requires_grad_()
    local J = F.jacobian(function(t) return t ^ 4 end, x, { create_graph = true })
    assert.is_true(J.requires_grad)
    H.close(grad(J:sum(), x), (function()
      local r = {}
      for i, v in ipairs(xs) do r[i] = 12 * v * v end
      return r
    end)(), 1e-12)
    local Hm = F.hessian(function(t) return (t ^ 4):sum() end, x, { create_graph = true })
    local r = {}
    for i, v in ipairs(xs) do r[i] = 24 * v end
    H.close(grad(Hm:sum(), x), r, 1e-12)
  end)

  it("leaves the caller's tensors as they were", function()
    local x = f64 { 1, 2 }
    local w = f64({ 1, -1, 2, 0.5 }, { 2, 2 }):requires_grad_()
    local y = f64 { 3, 4 }:requires_grad_()
    F.jacobian(function(a, b) return w:matmul(a * b) end, { x, y })
    F.hessian(function(a, b) return (w:matmul(a * b) ^ 2):sum() end, { x, y })
    F.vjp(function(a) return a * w end, x, tide.ones(2, 2, "float64"))
    F.jvp(function(a) return a * w end, y, tide.ones(2, "float64"), { create_graph = true })
    assert.is_false(x.requires_grad)
    assert.is_true(y.requires_grad and y.is_leaf)
    assert.is_nil(x.grad)
    assert.is_nil(y.grad)
    assert.is_nil(w.grad)
  end)

  it("accepts vectorize and refuses forward mode, saying so", function()
    local x = f64 { 1, 2 }
    H.close(F.jacobian(function(t) return t * 3 end, x, { vectorize = true }), diag { 3, 3 }, 0, 0)
    assert.has_error(function() F.jacobian(function(t) return t end, x, { strategy = "forward-mode" }) end,
      "jacobian: strategy 'forward-mode' is not available: tide's autograd is reverse-mode only"
      .. " (use 'reverse-mode'; jvp gives Jacobian-vector products)")
    assert.has_error(function() F.jacobian(function(t) return t end, x, { strategy = "sideways" }) end,
      "jacobian: strategy must be 'reverse-mode' or 'forward-mode', got sideways")
    assert.has_error(function()
      F.hessian(function(t) return t:sum() end, x, { outer_jacobian_strategy = "forward-mode" })
    end, "hessian: outer_jacobian_strategy 'forward-mode' is not available: tide's autograd is reverse-mode only"
      .. " (use 'reverse-mode'; jvp gives Jacobian-vector products)")
  end)
end)

describe("autograd.functional.hessian", function()
  it("gives Rosenbrock's Hessian computed by hand", function()
    local Hm = F.hessian(rosenbrock, f64(rb_point))
    H.close(Hm, rosenbrock_hessian(rb_point), 1e-12, 1e-10)
    assert.is_false(Hm.requires_grad)
  end)

  it("matches finite differences of the gradient, in blocks for several inputs", function()
    local function f(x, y) return (x:matmul(y):sin()):sum() + (x ^ 3):sum() * y:sum() end
    local x, y = f64(H.values(6, -1, 1, 9), { 2, 3 }), f64(H.values(3, -1, 1, 11))
    local Hs = F.hessian(f, { x, y })
    local function g(a, b) return grad(f(a, b), { a, b }, nil) end
    for k = 1, 2 do
      for l = 1, 2 do
        local num = numeric_jacobian(function(a, b)
          return g(a:detach():requires_grad_(), b:detach():requires_grad_())
        end, { x, y }, k, l)
        H.close(Hs[k][l], num, 1e-6, 1e-7, "block " .. k .. ", " .. l)
      end
    end
    H.close(Hs[1][2]:reshape(6, 3), Hs[2][1]:reshape(3, 6):t(), 1e-12, 1e-14)   -- symmetric
  end)

  it("gives zeros for a linear function, and a 0-d Hessian for a 0-d input", function()
    H.close(F.hessian(function(x) return (x * 3):sum() end, f64 { 1, 2 }), tide.zeros(2, 2, "float64"), 0, 0)
    H.close(F.hessian(function(x) return x:exp() end, f64(0.5):reshape({})), math.exp(0.5), 1e-12)
    assert.are.same({ 0, 0 }, F.hessian(function(x) return (x ^ 3):sum() end, tide.zeros(0, "float64")):shape())
  end)

  it("refuses a function whose result is not one element", function()
    local x = f64 { 1, 2 }
    assert.has_error(function() F.hessian(function(t) return t * 2 end, x) end,
      "hessian: the function's result must have one element, got shape [2]")
    assert.has_error(function() F.hessian(function(t) return { t:sum() } end, x) end,
      "hessian: the function must return a single tensor, got table")
  end)
end)

describe("autograd.functional products", function()
  local A = f64({ 2, -1, 0.5, 3, 0, -4 }, { 2, 3 })
  local function lin(x) return A:matmul(x) end
  local x0 = f64 { 0.3, -2, 1 }

  it("vjp gives u^T A and the detached output", function()
    local out, vj = F.vjp(lin, x0, f64 { 1, -2 })
    H.close(out, A:matmul(x0), 0, 0)
    H.close(vj, { 2 - 6, -1, 0.5 + 8 }, 0, 0)
    assert.is_false(out.requires_grad or vj.requires_grad)
  end)

  it("jvp gives A v by the double-backward trick", function()
    local out, jv = F.jvp(lin, x0, f64 { 1, 0, -2 })
    H.close(out, A:matmul(x0), 0, 0)
    H.close(jv, { 2 - 1, 3 + 8 }, 0, 0)
    local _, jc = F.jvp(function(x) return x:sin() end, f64(xs), tide.ones(5, "float64"))
    local r = {}
    for i, v in ipairs(xs) do r[i] = math.cos(v) end
    H.close(jc, r, 1e-12)
  end)

  it("vjp and jvp match the Jacobian, with several inputs and outputs", function()
    local function f(x, y) return { (x * y):sum(), x:matmul(y:reshape(3, 1)):tanh() } end
    local x, y = f64(H.values(6, -1, 1, 21), { 2, 3 }), f64(H.values(3, -1, 1, 22))
    local J = F.jacobian(f, { x, y })
    local u = { f64(0.5):reshape({}), f64({ 1, -3 }, { 2, 1 }) }
    local v = { f64(H.values(6, -1, 1, 23), { 2, 3 }), f64 { 2, 0, -1 } }
    local outs, vj = F.vjp(f, { x, y }, u)
    assert.are.equal(2, #outs)
    for k = 1, 2 do
      local want = u[1] * J[1][k] + (u[2]:reshape(2, 1) * J[2][k]:reshape(2, -1)):sum(1):reshape(J[1][k]:shape())
      H.close(vj[k], want, 1e-12, 1e-14, "vjp input " .. k)
    end
    local _, jv = F.jvp(f, { x, y }, v)
    for o = 1, 2 do
      local want = J[o][1]:reshape(-1, 6):matmul(v[1]:reshape(6)) + J[o][2]:reshape(-1, 3):matmul(v[2])
      H.close(jv[o], want:reshape(o == 1 and {} or { 2, 1 }), 1e-12, 1e-14, "jvp output " .. o)
    end
  end)

  it("hvp and vhp give Rosenbrock's Hessian times v", function()
    local v = { 1, -0.5, 2, 0.25 }
    local Hm = rosenbrock_hessian(rb_point)
    local want = {}
    for i = 1, 4 do
      want[i] = 0
      for j = 1, 4 do want[i] = want[i] + Hm[i][j] * v[j] end
    end
    local out, hv = F.hvp(rosenbrock, f64(rb_point), f64(v))
    H.close(out, rosenbrock(f64(rb_point)), 1e-14)
    H.close(hv, want, 1e-12, 1e-10)
    local _, vh = F.vhp(rosenbrock, f64(rb_point), f64(v))
    H.close(vh, want, 1e-12, 1e-10)
  end)

  it("hvp and vhp go block by block over several inputs", function()
    local function f(x, y) return (x * x * y):sum() end    -- H = [[2 diag(y), 2 diag(x)], [2 diag(x), 0]]
    local x, y = f64 { 1, -2 }, f64 { 3, 0.5 }
    local vx, vy = f64 { 1, 1 }, f64 { -1, 2 }
    local want = { { 2 * 3 * 1 + 2 * 1 * -1, 2 * 0.5 * 1 + 2 * -2 * 2 }, { 2 * 1 * 1, 2 * -2 * 1 } }
    for _, fn in ipairs { F.hvp, F.vhp } do
      local _, r = fn(f, { x, y }, { vx, vy })
      H.close(r[1], want[1], 1e-14)
      H.close(r[2], want[2], 1e-14)
    end
  end)

  it("take v = nil for one-element outputs (vjp) and inputs (jvp, hvp, vhp)", function()
    local s = f64(0.5):reshape({})
    local _, vj = F.vjp(function(x) return (x ^ 2):sum() end, f64 { 1, 2 })
    H.close(vj, { 2, 4 }, 0, 0)
    local _, jv = F.jvp(function(x) return f64 { 1, 2 } * x end, s)
    H.close(jv, { 1, 2 }, 0, 0)
    local _, hv = F.hvp(function(x) return x ^ 3 end, s)
    H.close(hv, 3, 1e-14)
    local _, vh = F.vhp(function(x) return x ^ 3 end, s, { create_graph = true })
    H.close(vh, 3, 1e-14)
    assert.has_error(function() F.vjp(function(x) return x end, f64 { 1, 2 }) end,
      "vjp: v can be omitted only when the outputs are a single tensor of one element")
    assert.has_error(function() F.jvp(function(x) return x end, f64 { 1, 2 }) end,
      "jvp: v can be omitted only when the inputs are a single tensor of one element")
  end)

  it("differentiate again with create_graph", function()
    local x = f64(xs):requires_grad_()
    local v = tide.ones(5, "float64")
    local out, hv = F.hvp(function(t) return (t ^ 4):sum() end, x, v, { create_graph = true })
    assert.is_true(out.requires_grad and hv.requires_grad)
    local r = {}
    for i, e in ipairs(xs) do r[i] = 24 * e end
    H.close(grad(hv:sum(), x), r, 1e-12)                     -- d/dx 12 x^2
    local _, vh = F.vhp(function(t) return (t ^ 4):sum() end, x, v, { create_graph = true })
    H.close(grad(vh:sum(), x), r, 1e-12)
    local _, jv = F.jvp(function(t) return t ^ 3 end, x, v, { create_graph = true })
    for i, e in ipairs(xs) do r[i] = 6 * e end
    H.close(grad(jv:sum(), x), r, 1e-12)
    local _, vj = F.vjp(function(t) return t ^ 3 end, x, v, { create_graph = true })
    H.close(grad(vj:sum(), x), r, 1e-12)
  end)

  it("give zeros for unused inputs and outputs with no history", function()
    local x, y = f64 { 1, 2 }, f64 { 3 }
    local _, vj = F.vjp(function(a) return a * 2 end, { x, y }, f64 { 1, 1 })
    H.close(vj[2], { 0 }, 0, 0)
    local _, jv = F.jvp(function(a) return { a * 2, f64 { 7 } } end, { x, y }, { f64 { 1, 1 }, f64 { 1 } })
    H.close(jv[1], { 2, 2 }, 0, 0)
    H.close(jv[2], { 0 }, 0, 0)
    local _, hv = F.hvp(function(a) return (a * 2):sum() end, x, f64 { 1, 1 })
    H.close(hv, { 0, 0 }, 0, 0)
    local _, vh = F.vhp(function(a, b) return (a ^ 2):sum() + b:sum() end, { x, y }, { f64 { 1, 1 }, f64 { 1 } })
    H.close(vh[1], { 2, 2 }, 0, 0)
    H.close(vh[2], { 0 }, 0, 0)
  end)

  it("handle empty tensors", function()
    local e = tide.zeros(0, "float64")
    local out, vj = F.vjp(function(t) return t * 2 end, e, tide.zeros(0, "float64"))
    assert.are.same({ 0 }, out:shape())
    assert.are.same({ 0 }, vj:shape())
    local _, jv = F.jvp(function(t) return t:exp() end, e, tide.zeros(0, "float64"))
    assert.are.same({ 0 }, jv:shape())
    local _, hv = F.hvp(function(t) return (t ^ 3):sum() end, e, tide.zeros(0, "float64"))
    assert.are.same({ 0 }, hv:shape())
  end)
end)

describe("autograd.functional errors", function()
  local x = f64 { 1, 2 }

  it("strict mode names the input or output at fault", function()
    local y = f64 { 3 }
    assert.has_error(function() F.jacobian(function(a) return a * 2 end, { x, y }, { strict = true }) end,
      "jacobian: output 1 does not depend on input 2, which strict = true does not allow")
    assert.has_error(function() F.vjp(function(a) return a * 2 end, { x, y }, f64 { 1, 1 }, { strict = true }) end,
      "vjp: the outputs do not depend on input 2, which strict = true does not allow")
    assert.has_error(function() F.jacobian(function() return f64 { 1 } end, x, { strict = true }) end,
      "jacobian: output 1 of the function does not require grad"
      .. " (it is not computed from the inputs by differentiable ops), which strict = true does not allow")
    assert.has_error(function() F.hessian(function(a) return (a * 3):sum() end, x, { strict = true }) end,
      "hessian: the gradient with respect to input 1 does not depend on the inputs"
      .. " (a linear function's does not), which strict = true does not allow")
    assert.has_error(function() F.vhp(function(a) return (a * 3):sum() end, x, x, { strict = true }) end,
      "vhp: the gradient with respect to input 1 does not depend on the inputs"
      .. " (a linear function's does not), which strict = true does not allow")
    assert.has_error(function()
      F.jvp(function(a) return { a * 2, f64 { 7 } } end, x, x, { strict = true })
    end, "jvp: output 2 of the function does not require grad"
      .. " (it is not computed from the inputs by differentiable ops), which strict = true does not allow")
    assert.has_error(function()
      F.jacobian(function(a) return a * 2 end, x:clone():requires_grad_(), { strict = true, create_graph = true })
    end, "jacobian: the Jacobian does not depend on input 1, so create_graph = true gives it no history,"
      .. " which strict = true does not allow")
    -- strict passes where everything depends on everything
    H.close(F.jacobian(function(a) return a ^ 2 end, x, { strict = true }), diag { 2, 4 }, 0, 0)
  end)

  it("name the function and the argument at fault", function()
    local id = function(t) return t end
    assert.has_error(function() F.jacobian(id, 3) end,
      "jacobian: inputs must be a tensor or a table of tensors, got number")
    assert.has_error(function() F.hessian(id, { x, "y" }) end, "hessian: input 2 must be a tensor, got string")
    assert.has_error(function() F.vjp(id, {}, x) end, "vjp: inputs must not be an empty table")
    assert.has_error(function() F.jvp("f", x, x) end, "jvp: argument 1 must be a function, got string")
    assert.has_error(function() F.jacobian(function() return 1 end, x) end,
      "jacobian: the function's result must be a tensor or a table of tensors, got number")
    assert.has_error(function() F.jacobian(function(t) return t, t end, x) end,
      "jacobian: the function must return a tensor or a table of tensors, got 2 values")
    assert.has_error(function() F.jacobian(id, tide.tensor({ 1, 2 }, "int64")) end,
      "jacobian: input 1 must be a floating-point tensor, got int64")
    assert.has_error(function() F.vjp(id, x, f64 { 1, 2, 3 }) end,
      "vjp: v 1 has shape [3], output 1 has shape [2]")
    assert.has_error(function() F.hvp(function(t) return t:sum() end, x, { x, x }) end,
      "hvp: v has 2 tensors, the inputs have 1")
    assert.has_error(function() F.vhp(id, x, x) end,
      "vhp: the function must return a single tensor of one element, got shape [2]")
    assert.has_error(function() F.jacobian(id, x, { create_graf = true }) end, "jacobian: unknown option 'create_graf'")
    assert.has_error(function() F.vjp(id, x, x, { strict = 1 }) end,
      "vjp: option strict must be a boolean, got number")
  end)
end)
