-- nn parametrizations: nn.utils.parametrize (register_parametrization with
-- right_inverse, chaining, assignment, cached, removal; the originals as the
-- parameters optimizers and state_dict see, under PyTorch's names), the
-- weight_norm / spectral_norm / orthogonal parametrizations against values
-- worked by hand, svdvals and Q^T Q = I, gradcheck in float64, and the older
-- hook-based nn.utils.weight_norm / spectral_norm with their remove_ functions.
local tide = require "tide"
local H = require "spec.helpers"
local nn = tide.nn
local P = nn.utils.parametrize
local PZ = nn.utils.parametrizations
local gradcheck = tide.autograd.gradcheck

local t64 = H.t64
local function set(t, v) tide.no_grad(function() t:copy_(tide.tensor(v, t:dtype())) end) end
local function max_abs(t) return t:abs():max():item() end
local function sorted_keys(m)
  local k = m:state_dict_keys()
  table.sort(k)
  return k
end
local function has(list, t)
  for _, x in ipairs(list) do if rawequal(x, t) then return true end end
  return false
end

-- A symmetric matrix from the upper triangle, with the identity as its right inverse.
local Symmetric = nn.Module:extend("Symmetric")
function Symmetric:forward(X) return X:triu() + X:triu(1):mT() end
function Symmetric:right_inverse(A) return A end

-- Counts its calls: x * 2, inverted by halving.
local Double = nn.Module:extend("Double")
function Double:init() self.calls = 0 end
function Double:forward(X) self.calls = self.calls + 1; return X * 2 end
function Double:right_inverse(A) return A / 2 end

describe("nn.utils.parametrize", function()
  it("computes the tensor from parametrizations.<name>.original on each read", function()
    local m = nn.Linear(3, 3, { dtype = "float64" })
    local w = m.weight
    local opt = tide.optim.SGD(m:parameters(), { lr = 0.1 })
    P.register_parametrization(m, "weight", Symmetric())
    assert.is_true(P.is_parametrized(m))
    assert.is_true(P.is_parametrized(m, "weight"))
    assert.is_false(P.is_parametrized(m, "bias"))
    assert.is_false(P.is_parametrized(nn.Linear(1, 1)))
    -- the original is the same parameter object, so the optimizer made before still trains it
    assert.is_true(rawequal(w, m.parametrizations.weight.original))
    local ps = m:parameters()
    assert.are.equal(2, #ps)
    assert.is_true(has(ps, w))
    local names = {}
    for name in m:named_parameters() do names[#names + 1] = name end
    assert.are.same({ "bias", "parametrizations.weight.original" }, names)
    set(w, { { 1, 2, 3 }, { 4, 5, 6 }, { 7, 8, 9 } })
    H.equal(m.weight, { { 1, 2, 3 }, { 2, 5, 6 }, { 3, 6, 9 } })
    assert.is_false(m.weight.is_leaf)
    -- gradients reach the original, and a step of the old optimizer changes the result
    m(t64({ { 1, 1, 1 } })):sum():backward()
    H.equal(w.grad, { { 1, 2, 2 }, { 0, 1, 2 }, { 0, 0, 1 } })
    opt:step()
    H.close(m.weight, { { 0.9, 1.8, 2.8 }, { 1.8, 4.9, 5.8 }, { 2.8, 5.8, 8.9 } }, 1e-12)
    -- assignment goes through right_inverse into the same original
    m.weight = t64({ { 1, 0, 0 }, { 0, 2, 0 }, { 0, 0, 3 } })
    assert.is_true(rawequal(w, m.parametrizations.weight.original))
    H.equal(m.weight, { { 1, 0, 0 }, { 0, 2, 0 }, { 0, 0, 3 } })
    assert.matches("%(parametrizations%): ModuleDict", tostring(m))
  end)

  it("starts the original at right_inverse(weight) and chains parametrizations", function()
    local m = nn.Linear(2, 2, { dtype = "float64" })
    set(m.weight, { { 2, 4 }, { 6, 8 } })
    local d1, d2 = Double(), Double()
    P.register_parametrization(m, "weight", d1)
    H.equal(m.parametrizations.weight.original, { { 1, 2 }, { 3, 4 } })
    H.equal(m.weight, { { 2, 4 }, { 6, 8 } })
    P.register_parametrization(m, "weight", d2)   -- applies to the first's result
    H.equal(m.weight, { { 4, 8 }, { 12, 16 } })
    H.equal(m.parametrizations.weight.original, { { 1, 2 }, { 3, 4 } })
    assert.are.equal(2, #m.parametrizations.weight)
    m.weight = t64({ { 4, 4 }, { 4, 4 } })   -- each right_inverse, last first
    H.equal(m.parametrizations.weight.original, { { 1, 1 }, { 1, 1 } })
    assert.are.same({ "bias", "parametrizations.weight.original" }, sorted_keys(m))
  end)

  it("cached computes each parametrized tensor once inside fn", function()
    local m = nn.Linear(2, 2)
    local d = Double()
    P.register_parametrization(m, "weight", d)
    local before = d.calls
    local a, b = m.weight, m.weight
    assert.are.equal(before + 2, d.calls)
    assert.is_false(rawequal(a, b))
    local x, y, z = P.cached(function(k)
      local w1, w2 = m.weight, m.weight
      return w1, w2, k
    end, 7)
    assert.are.equal(before + 3, d.calls)
    assert.is_true(rawequal(x, y))
    assert.are.equal(7, z)
    local _ = m.weight   -- outside: computed again
    assert.are.equal(before + 4, d.calls)
    assert.has_error(function() P.cached(function() error("inner", 0) end) end, "inner")
    _ = m.weight         -- the cache is off again after an error
    _ = m.weight
    assert.are.equal(before + 6, d.calls)
  end)

  it("remove_parametrizations leaves a plain parameter with the current or the original value", function()
    local m = nn.Linear(2, 2, { dtype = "float64" })
    set(m.weight, { { 1, 2 }, { 3, 4 } })
    local w = m.weight
    P.register_parametrization(m, "weight", Symmetric())
    P.remove_parametrizations(m, "weight")
    assert.is_false(P.is_parametrized(m))
    assert.is_true(rawequal(w, m.weight))
    assert.is_true(m.weight.is_leaf and m.weight.requires_grad)
    H.equal(m.weight, { { 1, 2 }, { 2, 4 } })
    assert.is_nil(m.parametrizations)
    assert.are.same({ "bias", "weight" }, sorted_keys(m))
    assert.are.equal("Linear", m:class_name())
    -- leave_parametrized = false: the original's value
    P.register_parametrization(m, "weight", Double())
    P.remove_parametrizations(m, "weight", false)
    H.equal(m.weight, { { 0.5, 1 }, { 1, 2 } })
    -- two parametrized tensors: removing one keeps the other
    P.register_parametrization(m, "weight", Double())
    P.register_parametrization(m, "bias", Double())
    P.remove_parametrizations(m, "weight")
    assert.is_true(P.is_parametrized(m, "bias"))
    assert.is_false(P.is_parametrized(m, "weight"))
    H.equal(m.weight, { { 0.5, 1 }, { 1, 2 } })
    P.remove_parametrizations(m, "bias")
    assert.is_false(P.is_parametrized(m))
  end)

  it("parametrizes buffers, and keeps working through to() and clone()", function()
    local bn = nn.BatchNorm1d(2)
    P.register_parametrization(bn, "running_var", Double())
    H.equal(bn.running_var, { 1, 1 })
    assert.is_nil(bn._parameters.running_var)
    assert.are.same({ "bias", "num_batches_tracked", "parametrizations.running_var.original", "running_mean",
      "weight" }, sorted_keys(bn))
    local m = nn.Linear(2, 2)
    P.register_parametrization(m, "weight", Double())
    m:to("float64")
    assert.are.equal("float64", m.weight:dtype())
    local c = m:clone()
    assert.is_true(P.is_parametrized(c, "weight"))
    set(c.parametrizations.weight.original, { { 1, 1 }, { 1, 1 } })
    H.equal(c.weight, { { 2, 2 }, { 2, 2 } })
    assert.is_true(max_abs(m.weight - 2) > 0)
  end)

  it("refuses unknown tensors, changes of shape and bad arguments", function()
    local m = nn.Linear(3, 2)
    assert.has_error(function() P.register_parametrization(m, "wieght", Symmetric()) end,
      "register_parametrization: Linear has no parameter or buffer 'wieght'")
    local Flat = nn.Module:extend("Flat")
    function Flat:forward(X) return X:reshape(-1) end
    assert.has_error(function() P.register_parametrization(m, "weight", Flat()) end,
      "register_parametrization: Linear.weight: parametrization Flat gives shape [6], but the tensor has shape " ..
      "[2,3] (pass {unsafe = true} to allow it)")
    assert.is_false(P.is_parametrized(m))   -- nothing changed
    assert.are.same({ 2, 3 }, m.weight:shape())
    P.register_parametrization(m, "weight", Flat(), { unsafe = true })
    assert.are.same({ 6 }, m.weight:shape())
    local sq = nn.Linear(2, 2)
    P.register_parametrization(sq, "weight", Double())
    assert.has_error(function() P.register_parametrization(sq, "weight", Flat()) end,
      "register_parametrization: Linear.weight: parametrization Flat gives shape [4], but the tensor has shape " ..
      "[2,2] (pass {unsafe = true} to allow it)")
    assert.has_error(function() P.register_parametrization(sq, "bias", Double(), { usafe = true }) end,
      "register_parametrization: unknown option 'usafe' (options: unsafe)")
    assert.has_error(function() P.register_parametrization(sq, "bias", 3) end,
      "register_parametrization: argument 3 must be a module, got number")
    assert.has_error(function() P.remove_parametrizations(sq, "bias") end,
      "remove_parametrizations: Linear has no parametrization on 'bias'")
    assert.has_error(function() sq.weight = nil end,
      "Linear: 'weight' is parametrized; remove it with nn.utils.parametrize.remove_parametrizations")
    local NoInverse = nn.Module:extend("NoInverse")
    function NoInverse:forward(X) return X + 1 end
    P.register_parametrization(sq, "weight", NoInverse())
    assert.has_error(function() sq.weight = tide.zeros(2, 2) end,
      "Linear.weight: cannot assign: parametrization 2 (NoInverse) has no right_inverse")
  end)
end)

describe("nn.utils.parametrizations.weight_norm", function()
  it("reproduces the weight at registration and gives g v / ||v|| after changes", function()
    local m = nn.Linear(2, 2, { dtype = "float64" })
    set(m.weight, { { 3, 4 }, { 0, -2 } })
    PZ.weight_norm(m)
    local pl = m.parametrizations.weight
    H.close(m.weight, { { 3, 4 }, { 0, -2 } }, 1e-15)
    H.close(pl.original0, { { 5 }, { 2 } }, 1e-15)
    H.equal(pl.original1, { { 3, 4 }, { 0, -2 } })
    set(pl.original0, { { 2 }, { 3 } })
    H.close(m.weight, { { 1.2, 1.6 }, { 0, -3 } }, 1e-15)
    set(pl.original1, { { 1, 1 }, { 6, 8 } })
    H.close(m.weight, { { 2 / math.sqrt(2), 2 / math.sqrt(2) }, { 1.8, 2.4 } }, 1e-15)
    assert.are.same({ "bias", "parametrizations.weight.original0", "parametrizations.weight.original1" },
      sorted_keys(m))
    -- dim = 2 (PyTorch's dim=1): a norm per column; false: one norm of everything
    local c = nn.Linear(2, 2, { dtype = "float64" })
    set(c.weight, { { 3, 4 }, { 4, 3 } })
    PZ.weight_norm(c, "weight", 2)
    H.close(c.parametrizations.weight.original0, { { 5, 5 } }, 1e-15)
    set(c.parametrizations.weight.original0, { { 10, 1 } })
    H.close(c.weight, { { 6, 0.8 }, { 8, 0.6 } }, 1e-15)
    local a = nn.Linear(2, 2, { dtype = "float64" })
    set(a.weight, { { 1, 1 }, { 1, 1 } })
    PZ.weight_norm(a, "weight", false)
    H.close(a.parametrizations.weight.original0, 2, 1e-15)
  end)

  it("gives g and v the gradients of finite differences", function()
    local m = nn.Linear(3, 2, { dtype = "float64" })
    PZ.weight_norm(m)
    local pl = m.parametrizations.weight
    local x = tide.randn(4, 3, { dtype = "float64" })
    assert.is_true(gradcheck(function() return m(x) end, { pl.original0, pl.original1 }))
    local c = nn.Conv2d(2, 3, 2, { dtype = "float64" })
    PZ.weight_norm(c, "weight", -1)
    local cp = c.parametrizations.weight
    assert.are.same({ 1, 1, 1, 2 }, cp.original0:shape())
    assert.is_true(gradcheck(function() return c.weight end, { cp.original0, cp.original1 }))
  end)

  it("trains a Linear with SGD on g and v", function()
    tide.manual_seed(1)
    local m = PZ.weight_norm(nn.Linear(3, 1))
    local opt = tide.optim.SGD(m:parameters(), { lr = 0.05 })
    local x = tide.randn(32, 3)
    local y = x:matmul(tide.tensor({ { 1 }, { -2 }, { 0.5 } })) + 0.3
    local first, last
    for i = 1, 60 do
      local loss = (m(x) - y):pow(2):mean()
      if i == 1 then first = loss:item() end
      last = loss:item()
      opt:zero_grad()
      loss:backward()
      opt:step()
    end
    assert.is_true(last < first * 0.2, string.format("loss %g -> %g", first, last))
  end)

  it("round-trips state_dict under PyTorch's names and is removed to a parameter", function()
    local a = PZ.weight_norm(nn.Linear(3, 2))
    set(a.parametrizations.weight.original0, { { 2 }, { 3 } })
    local b = PZ.weight_norm(nn.Linear(3, 2))
    b:load_state_dict(a:state_dict())
    H.equal(b.weight, a.weight)
    local w = a.weight:detach():clone()
    P.remove_parametrizations(a, "weight")
    H.close(a.weight, w, 1e-6)
    assert.is_true(a.weight.is_leaf and a.weight.requires_grad)
    assert.are.same({ "bias", "weight" }, sorted_keys(a))
    assert.has_error(function()
      P.register_parametrization(b, "weight", Double())
      P.remove_parametrizations(b, "weight", false)
    end, "remove_parametrizations: Linear.weight is parametrized by 2 tensors, so it cannot go back to an " ..
      "original (leave_parametrized = false)")
    assert.has_error(function() PZ.weight_norm(nn.Linear(3, 2), "weight", 3) end,
      "weight_norm: dimension 3 is out of range for a 2-d weight")
    assert.has_error(function() PZ.weight_norm(nn.Linear(3, 2), "w") end,
      "weight_norm: Linear has no parameter or buffer 'w'")
  end)
end)

describe("nn.utils.parametrizations.spectral_norm", function()
  local function sigma_max(w) return tide.linalg.svdvals(w:detach()):max():item() end

  it("divides by the largest singular value, reached by power iteration in training mode", function()
    tide.manual_seed(2)
    local m = nn.Linear(5, 4, { dtype = "float64" })
    set(m.weight, tide.randn(4, 5, { dtype = "float64" }) * 3)
    PZ.spectral_norm(m)
    for _ = 1, 30 do local _ = m.weight end
    H.close(tide.tensor(sigma_max(m.weight), "float64"), 1, 1e-8)
    local pl = m.parametrizations.weight
    H.close(m.weight, pl.original / sigma_max(pl.original), 1e-8)
    assert.are.same({ "bias", "parametrizations.weight.0._u", "parametrizations.weight.0._v",
      "parametrizations.weight.original" }, sorted_keys(m))
    -- eval: u and v stay
    m:eval()
    assert.is_false(pl[1].training)
    local u, v = pl[1]._u:clone(), pl[1]._v:clone()
    set(pl.original, tide.randn(4, 5, { dtype = "float64" }))
    local w1 = m.weight
    H.equal(pl[1]._u, u)
    H.equal(pl[1]._v, v)
    H.equal(m.weight, w1)
    m:train()
    local _ = m.weight
    assert.is_true(max_abs(pl[1]._u - u) > 0)
  end)

  it("takes dim (2 for ConvTranspose) and gives gradients of finite differences", function()
    tide.manual_seed(3)
    local c = PZ.spectral_norm(nn.ConvTranspose2d(3, 2, 2, { dtype = "float64" }))
    local sn = c.parametrizations.weight[1]
    assert.are.equal(2, sn.dim)
    assert.are.same({ 2 }, sn._u:shape())      -- rows: the output channels, dim 2 of [3,2,2,2]
    assert.are.same({ 12 }, sn._v:shape())
    c:eval()
    local pl = c.parametrizations.weight
    assert.is_true(gradcheck(function() return c.weight end, { pl.original }))
    local m = PZ.spectral_norm(nn.Linear(4, 3, { dtype = "float64" }), "weight", 3, 1e-10, 2)
    assert.are.same({ 4 }, m.parametrizations.weight[1]._u:shape())
    assert.has_error(function() PZ.spectral_norm(nn.Linear(4, 3), "weight", 0) end,
      "spectral_norm: n_power_iterations must be a positive integer, got 0")
    assert.has_error(function() PZ.spectral_norm(nn.Linear(4, 3), "weight", 1, 1e-12, 3) end,
      "spectral_norm: dimension 3 is out of range for a 2-d weight")
  end)

  it("round-trips state_dict and is removed to a parameter", function()
    local a = PZ.spectral_norm(nn.Linear(3, 2))
    local b = PZ.spectral_norm(nn.Linear(3, 2))
    b:load_state_dict(a:state_dict())
    a:eval(); b:eval()
    H.close(b.weight, a.weight, 1e-6)
    local w = a.weight:detach():clone()
    P.remove_parametrizations(a, "weight")
    H.close(a.weight, w, 1e-6)
    assert.are.same({ "bias", "weight" }, sorted_keys(a))
  end)
end)

describe("nn.utils.parametrizations.orthogonal", function()
  local function check_orthogonal(W, tol)
    local n, k = W:size(1), W:size(2)
    local G = n < k and W:matmul(W:mT()) or W:mT():matmul(W)
    H.close(G, tide.eye(math.min(n, k), { dtype = W:dtype() }), 0, tol)
  end

  for _, map in ipairs { "matrix_exp", "cayley", "householder" } do
    it("keeps W^T W = I with " .. map .. " for square, tall and wide weights", function()
      tide.manual_seed(4)
      for _, sh in ipairs { { 4, 4 }, { 5, 3 }, { 3, 5 } } do
        local m = nn.Linear(sh[2], sh[1], { dtype = "float64" })
        local w0 = m.weight:detach():clone()
        PZ.orthogonal(m, "weight", map)
        local pl = m.parametrizations.weight
        check_orthogonal(m.weight, 1e-10)
        -- the weight starts at the Q of its QR (the span of w0's columns, or rows when wide)
        local W = m.weight:detach()
        local A = sh[1] >= sh[2] and w0 or w0:mT()
        local Q = sh[1] >= sh[2] and W or W:mT()
        H.close(Q:matmul(Q:mT():matmul(A)), A, 1e-9, 1e-9)
        -- householder reads signs from the original's diagonal (no gradient reaches it): kept there
        local mask = map == "householder" and 1 - tide.eye(sh[1], sh[2], { dtype = "float64" }) or 1
        for _ = 1, 3 do
          set(pl.original, pl.original + tide.randn(sh[1], sh[2], { dtype = "float64" }) * mask * 0.5)
          check_orthogonal(m.weight, 1e-9)
        end
        -- gradients flow to the original, and a step keeps the weight orthogonal
        local opt = tide.optim.SGD(m:parameters(), { lr = 0.1 })
        m(tide.randn(2, sh[2], { dtype = "float64" })):pow(2):sum():backward()
        assert.is_true(max_abs(pl.original.grad) > 0)
        opt:step()
        check_orthogonal(m.weight, 1e-9)
      end
    end)
  end

  it("makes each matrix of a batch orthogonal", function()
    tide.manual_seed(6)
    local Batch = nn.Module:extend("Batch")
    function Batch:init(shape) self.w = tide.randn(shape, { dtype = "float64" }):requires_grad_() end
    for _, map in ipairs { "matrix_exp", "cayley", "householder" } do
      for _, shape in ipairs { { 2, 3, 3 }, { 2, 4, 2 }, { 2, 2, 4 } } do
        local m = PZ.orthogonal(Batch(shape), "w", map)
        set(m.parametrizations.w.original,
          m.parametrizations.w.original + tide.randn(shape, { dtype = "float64" }):tril(-1) * 0.3)
        local W = m.w
        local G = shape[2] < shape[3] and W:matmul(W:mT()) or W:mT():matmul(W)
        H.close(G, tide.eye(G:size(-1), { dtype = "float64" }):expand(G:shape()), 0, 1e-12, map)
      end
    end
  end)

  it("assigns an orthogonal matrix through right_inverse, round-trips state_dict, and refuses 1-d weights", function()
    local m = PZ.orthogonal(nn.Linear(3, 3, { dtype = "float64" }))
    local R = t64({ { 0, -1, 0 }, { 1, 0, 0 }, { 0, 0, 1 } })
    m.weight = R
    H.close(m.weight, R, 0, 1e-12)
    assert.are.same({ "bias", "parametrizations.weight.0.base", "parametrizations.weight.original" }, sorted_keys(m))
    local b = PZ.orthogonal(nn.Linear(3, 3, { dtype = "float64" }))
    b:load_state_dict(m:state_dict())
    H.close(b.weight, R, 0, 1e-12)
    local g = PZ.orthogonal(nn.Linear(3, 3, { dtype = "float64" }), "weight", "cayley", { use_trivialization = false })
    check_orthogonal(g.weight, 1e-12)
    assert.are.same({ "bias", "parametrizations.weight.original" }, sorted_keys(g))
    assert.has_error(function() g.weight = R end,
      "orthogonal: cannot assign to the cayley map with use_trivialization = false")
    assert.has_error(function() PZ.orthogonal(nn.Linear(3, 3), "bias") end,
      "orthogonal: Linear.bias must be a matrix or a batch of matrices, got a 1-d tensor")
    assert.has_error(function() PZ.orthogonal(nn.Linear(3, 3), "weight", "qr") end,
      "orthogonal: orthogonal_map must be 'matrix_exp', 'cayley' or 'householder', got qr")
    assert.has_error(function()
      PZ.orthogonal(nn.Linear(3, 3), "weight", "householder", { use_trivialization = false })
    end, "orthogonal: the householder map needs use_trivialization = true here (its inverse needs LAPACK's " ..
      "geqrf, which tide lacks)")
    assert.has_error(function() PZ.orthogonal(nn.Linear(3, 3), "weight", nil, { trivial = true }) end,
      "orthogonal: unknown option 'trivial'")
    assert.has_error(function() m.weight = tide.eye(2, { dtype = "float64" }) end,
      "orthogonal: expected a matrix or batch of matrices of shape [3,3], got shape [2,2]")
  end)
end)

describe("nn.utils.weight_norm and spectral_norm (forward pre-hooks)", function()
  it("weight_norm keeps weight_g and weight_v and recomputes weight before each forward", function()
    local m = nn.Linear(2, 2, { dtype = "float64" })
    set(m.weight, { { 3, 4 }, { 0, -2 } })
    set(m.bias, { 0, 0 })
    nn.utils.weight_norm(m)
    assert.are.same({ "bias", "weight_g", "weight_v" }, sorted_keys(m))
    H.close(m.weight_g, { { 5 }, { 2 } }, 1e-15)
    H.close(m.weight, { { 3, 4 }, { 0, -2 } }, 1e-15)
    set(m.weight_g, { { 2 }, { 3 } })
    H.close(m(t64({ { 1, 0 } })), { { 1.2, 0 } }, 1e-15)   -- the hook recomputed weight
    H.close(m.weight, { { 1.2, 1.6 }, { 0, -3 } }, 1e-15)
    m(t64({ { 1, 1 } })):sum():backward()
    assert.is_true(m.weight_g.grad ~= nil and m.weight_v.grad ~= nil)
    assert.has_error(function() nn.utils.weight_norm(m) end,
      "weight_norm: Linear already has a weight_norm hook on 'weight'")
    set(m.weight_v, { { 1, 0 }, { 0, 1 } })
    nn.utils.remove_weight_norm(m)
    H.close(m.weight, { { 2, 0 }, { 0, 3 } }, 1e-15)
    assert.is_true(m.weight.is_leaf and m.weight.requires_grad)
    assert.are.same({ "bias", "weight" }, sorted_keys(m))
    H.close(m(t64({ { 1, 1 } })), { { 2, 3 } }, 1e-15)   -- no hook left
    assert.has_error(function() nn.utils.remove_weight_norm(m) end,
      "remove_weight_norm: weight_norm of 'weight' not found in Linear")
  end)

  it("spectral_norm keeps weight_orig, weight_u and weight_v and normalises before each forward", function()
    tide.manual_seed(5)
    local m = nn.Linear(4, 3, { dtype = "float64" })
    nn.utils.spectral_norm(m)
    assert.are.same({ "bias", "weight_orig", "weight_u", "weight_v" }, sorted_keys(m))
    local x = tide.randn(2, 4, { dtype = "float64" })
    for _ = 1, 30 do m(x) end
    H.close(tide.tensor(tide.linalg.svdvals(m.weight:detach()):max():item(), "float64"), 1, 1e-8)
    m:eval()
    local u = m.weight_u:clone()
    m(x)
    H.equal(m.weight_u, u)
    local w = m.weight:detach():clone()
    nn.utils.remove_spectral_norm(m)
    H.close(m.weight, w, 1e-12)
    assert.are.same({ "bias", "weight" }, sorted_keys(m))
    assert.has_error(function() nn.utils.remove_spectral_norm(m) end,
      "remove_spectral_norm: spectral_norm of 'weight' not found in Linear")
    assert.has_error(function() nn.utils.spectral_norm(nn.Linear(2, 2), "running") end,
      "spectral_norm: Linear has no parameter or buffer 'running'")
  end)
end)
