-- compose_extra_spec: the second batch of tide.compose (addmm & co, NumPy's
-- names, the scatter family, statistics, integer and bit functions,
-- matrix_exp) against hand-computed values or float64 references computed in
-- plain Lua, on contiguous and strided layouts, empty and 0-d tensors, their
-- gradients (gradcheck in float64) and their errors. Runs on any default device.
local tide = require "tide"
local H = require "spec.helpers"

local gradcheck = tide.autograd.gradcheck
local T = tide.tensor
local function I(v) return T(v, "int64") end
local function D(v) return T(v, "float64") end
local each_layout = H.each_layout
local function shape(t) return table.concat(t:shape(), ",") end
local nan, inf = 0 / 0, math.huge

-- n pseudo-random float64 values in [-2, 2) shaped as `s`, requiring grad
local function rnd(s, seed)
  local n = 1
  for _, v in ipairs(s) do n = n * v end
  return D(H.nest(H.values(n, -2, 2, seed), s)):requires_grad_()
end
local mm = require("spec.helpers.linalg_ref").mm   -- plain-Lua matrix product of nested tables
local function map2(a, b, f)
  local r = {}
  for i = 1, #a do
    if type(a[i]) == "table" then r[i] = map2(a[i], b[i], f) else r[i] = f(a[i], b[i]) end
  end
  return r
end

describe("tide.compose (extra)", function()
  describe("products with a scaled sum", function()
    local A, Bm = { { 1, 2, 3 }, { 4, 5, 6 } }, { { 1, -1 }, { 0, 2 }, { 3, 1 } }

    it("addmm: beta * input + alpha * mat1 @ mat2, input broadcast", function()
      local p = mm(A, Bm)
      each_layout(T(A), function(a)
        each_layout(T(Bm), function(b)
          H.close(tide.addmm(T({ 1, 2 }), a, b, { beta = 2, alpha = 3 }),
            map2(p, { { 1, 2 }, { 1, 2 } }, function(x, y) return 3 * x + 2 * y end))
        end)
      end)
      H.equal(T({ { 1, 1 }, { 1, 1 } }):addmm(T(A), T(Bm)), map2(p, p, function(x) return x + 1 end))
      -- beta 0 leaves input out, its NaN too
      H.equal(tide.addmm(T({ nan, nan }), T(A), T(Bm), { beta = 0 }), p)
      assert.are.equal("float64", tide.addmm(D({ 0 }), T(A), T(Bm), { beta = 0 }):dtype())
      H.equal(tide.addmm(I({ 1 }), I(A), I(Bm), { alpha = 2 }), map2(p, p, function(x) return 2 * x + 1 end))
      assert.are.equal("int64", tide.addmm(I({ 1 }), I(A), I(Bm)):dtype())
      -- empty inner dimension: input alone
      H.equal(tide.addmm(T(5), tide.zeros(2, 0), tide.zeros(0, 3)), { { 5, 5, 5 }, { 5, 5, 5 } })
    end)

    it("addbmm, baddbmm, addmv, addr, mv", function()
      local b1 = T({ A, { { 0, 1, 0 }, { 1, 0, 1 } } })       -- [2,2,3]
      local b2 = T({ Bm, { { 1, 1 }, { 1, 1 }, { 1, 1 } } })  -- [2,3,2]
      local p1, p2 = mm(A, Bm), mm({ { 0, 1, 0 }, { 1, 0, 1 } }, { { 1, 1 }, { 1, 1 }, { 1, 1 } })
      H.equal(tide.addbmm(T(1), b1, b2), map2(p1, p2, function(x, y) return x + y + 1 end))
      H.equal(tide.addbmm(tide.zeros(2, 2), b1:transpose(2, 3):clone():transpose(2, 3), b2, { alpha = 2 }),
        map2(p1, p2, function(x, y) return 2 * (x + y) end))
      H.equal(tide.baddbmm(T({ 10, 20 }), b1, b2, { beta = 0.5 }),
        { map2(p1, { { 5, 10 }, { 5, 10 } }, function(x, y) return x + y end),
          map2(p2, { { 5, 10 }, { 5, 10 } }, function(x, y) return x + y end) })
      H.equal(tide.addbmm(T(7), tide.zeros(0, 2, 3), tide.zeros(0, 3, 2)), { { 7, 7 }, { 7, 7 } })
      each_layout(T(A), function(a)
        H.equal(tide.addmv(T({ 1, 1 }), a, T({ 1, 0, -1 }), { alpha = 2 }), { -3, -3 })
        H.equal(tide.mv(a, T({ 1, 1, 1 })), { 6, 15 })
        H.equal(a:mv(T({ 0, 1, 0 })), { 2, 5 })
      end)
      H.equal(tide.addr(tide.ones(2, 3), T({ 1, 2 }), T({ 1, 0, -1 })), { { 2, 1, 0 }, { 3, 1, -1 } })
      H.equal(tide.ger(T({ 1, 2 }), T({ 3, 4 })), { { 3, 4 }, { 6, 8 } })
    end)

    it("the in-place forms write the result into the tensor", function()
      local x = tide.ones(2, 2)
      assert.are.equal(x, x:addmm_(T(A), T(Bm), { beta = 2 }))
      H.equal(x, map2(mm(A, Bm), mm(A, Bm), function(v) return v + 2 end))
      local y = T({ 1, 1 })
      y:addmv_(T(A), T({ 1, 1, 1 }))
      H.equal(y, { 7, 16 })
      local z = tide.zeros(2, 2)
      z:addr_(T({ 1, 2 }), T({ 1, 1 }), { alpha = 2 })
      H.equal(z, { { 2, 2 }, { 4, 4 } })
      local w = tide.ones(1, 2, 2)
      w:baddbmm_(T({ { { 1, 0 }, { 0, 1 } } }), T({ { { 1, 2 }, { 3, 4 } } }), { beta = -1 })
      H.equal(w, { { { 0, 1 }, { 2, 3 } } })
      local u = tide.zeros(2, 2)
      u:addbmm_(tide.ones(3, 2, 1), tide.ones(3, 1, 2))
      H.equal(u, { { 3, 3 }, { 3, 3 } })
    end)

    it("inner, vdot and chain_matmul", function()
      H.equal(tide.inner(T({ { 1, 2 }, { 3, 4 } }), T({ 1, 1 })), { 3, 7 })
      H.equal(tide.inner(T({ 1, 2, 3 }), T({ 4, 5, 6 })), 32)
      H.equal(tide.inner(T({ { 1, 2 } }), T({ { 1, 0 }, { 0, 1 }, { 1, 1 } })), { { 1, 2, 3 } })
      H.equal(tide.inner(T(2), T({ 1, 2 })), { 2, 4 })
      H.equal(tide.vdot(T({ 1, 2, 3 }), T({ 1, 0, 2 })), 7)
      local m = { T(A), T(Bm), T({ { 1, 0 }, { 0, 1 } }), T({ { 2 }, { 1 } }) }
      H.equal(tide.chain_matmul(m), mm(mm(mm(A, Bm), { { 1, 0 }, { 0, 1 } }), { { 2 }, { 1 } }))
      H.equal(tide.chain_matmul(m[1], m[2]), mm(A, Bm))
      local one = tide.chain_matmul(m[1])
      one:fill_(0)
      H.equal(m[1], A)   -- a copy
    end)

    it("checks its arguments", function()
      local a, b = T(A), T(Bm)
      assert.has_error(function() return tide.addmm(T(0), T({ 1 }), b) end, "addmm: mat1 must be 2-d, got 1-d")
      assert.has_error(function() return tide.addmm(T(0), a, a) end,
        "addmm: mat1 and mat2 shapes cannot be multiplied ([2,3] and [2,3])")
      assert.has_error(function() return tide.addmm(tide.ones(3, 3), a, b) end,
        "addmm: input of shape [3,3] cannot be broadcast to the product's shape [2,2]")
      assert.has_error(function() return tide.addmm(I(0), I(A), I(Bm), { beta = 0.5 }) end,
        "addmm: beta must be an integer for integer tensors, got 0.5")
      assert.has_error(function() return tide.addmm(T(0), a, b, { gamma = 1 }) end, "addmm: unknown option 'gamma'")
      assert.has_error(function() return tide.addmm(T(0), a, b, { alpha = "2" }) end,
        "addmm: alpha must be a number, got string")
      assert.has_error(function() return T({ 1, 1 }):addmm_(a, b) end,
        "addmm_: the result's shape [2,2] does not match the tensor's shape [2]")
      assert.has_error(function() return I({ { 0, 0 }, { 0, 0 } }):addmm_(a, b) end,
        "addmm_: a float32 result cannot be written into a int64 tensor")
      assert.has_error(function() return tide.addbmm(T(0), tide.ones(2, 2, 3), tide.ones(3, 3, 2)) end,
        "addbmm: batch1 and batch2 must have the same number of matrices, got 2 and 3")
      assert.has_error(function() return tide.baddbmm(T(0), tide.ones(2, 2, 3), tide.ones(2, 2, 2)) end,
        "baddbmm: batch1 and batch2 shapes cannot be multiplied ([2,2,3] and [2,2,2])")
      assert.has_error(function() return tide.addmv(T(0), a, T({ 1, 2 })) end,
        "addmv: mat and vec shapes cannot be multiplied ([2,3] and [2])")
      assert.has_error(function() return tide.addr(T(0), a, T({ 1 })) end, "addr: vec1 must be 1-d, got 2-d")
      assert.has_error(function() return tide.mv(a, a) end, "mv: vec must be 1-d, got 2-d")
      assert.has_error(function() return tide.ger(a, a) end, "ger: vec1 must be 1-d, got 2-d")
      assert.has_error(function() return tide.vdot(a, T({ 1 })) end, "vdot: expected 1-d tensors, got 2-d and 1-d")
      assert.has_error(function() return tide.vdot(T({ 1, 2 }), T({ 1 })) end,
        "vdot: the tensors must have the same number of elements, got 2 and 1")
      assert.has_error(function() return tide.inner(T({ 1, 2 }), T({ 1 })) end,
        "inner: the last dimensions must have the same size, got shapes [2] and [1]")
      assert.has_error(function() return tide.chain_matmul(a, T({ 1 })) end,
        "chain_matmul: tensor 2 must be 2-d, got 1-d")
      assert.has_error(function() return tide.chain_matmul(a, a) end,
        "chain_matmul: matrices 1 and 2 cannot be multiplied ([2,3] and [2,3])")
      assert.has_error(function() return tide.addmm(5, a, b) end, "addmm: argument 1 must be a tensor, got number")
    end)

    it("gradients", function()
      local i, a, b = rnd({ 2 }, 1), rnd({ 2, 3 }, 2), rnd({ 3, 2 }, 3)
      assert.is_true(gradcheck(function(x, y, z) return tide.addmm(x, y, z, { beta = 0.5, alpha = -2 }) end,
        { i, a, b }))
      local b1, b2 = rnd({ 2, 2, 3 }, 4), rnd({ 2, 3, 2 }, 5)
      assert.is_true(gradcheck(function(x, y, z) return tide.addbmm(x, y, z, { alpha = 3 }) end, { i, b1, b2 }))
      assert.is_true(gradcheck(function(x, y, z) return tide.baddbmm(x, y, z) end, { i, b1, b2 }))
      local v = rnd({ 3 }, 6)
      assert.is_true(gradcheck(function(x, y, z) return tide.addmv(x, y, z, { beta = 2 }) end, { i, a, v }))
      assert.is_true(gradcheck(function(x, y, z) return tide.addr(x:unsqueeze(2), y, z) end, { i, rnd({ 2 }, 7), v }))
      assert.is_true(gradcheck(tide.inner, { a, b:t():contiguous():requires_grad_() }))
      assert.is_true(gradcheck(function(x, y) return tide.chain_matmul(x, y, x) end, { a, b }))
    end)
  end)

  describe("block_diag and diagflat", function()
    it("place the blocks on the diagonal", function()
      H.equal(tide.block_diag(T(1), T({ 2, 3 }), I({ { 4 }, { 5 } })),
        { { 1, 0, 0, 0 }, { 0, 2, 3, 0 }, { 0, 0, 0, 4 }, { 0, 0, 0, 5 } })
      assert.are.equal("float32", tide.block_diag(T(1), I({ 2 })):dtype())
      assert.are.equal("int64", tide.block_diag({ I({ 1 }), I({ { 2 } }) }):dtype())
      each_layout(T({ { 1, 2 }, { 3, 4 } }), function(m)
        H.equal(tide.block_diag(m, m:narrow(1, 1, 1)), { { 1, 2, 0, 0 }, { 3, 4, 0, 0 }, { 0, 0, 1, 2 } })
      end)
      assert.are.equal("1,0", shape(tide.block_diag()))
      assert.are.equal("2,3", shape(tide.block_diag(tide.zeros(2, 0), tide.zeros(0, 3))))
      H.equal(tide.diagflat(T({ { 1, 2 } })), { { 1, 0 }, { 0, 2 } })
      H.equal(T({ 1, 2 }):diagflat(-1), { { 0, 0, 0 }, { 1, 0, 0 }, { 0, 2, 0 } })
      H.equal(tide.diagflat(T(3)), { { 3 } })
      assert.is_true(gradcheck(function(x, y) return tide.block_diag(x, y) end, { rnd({ 2 }, 1), rnd({ 2, 2 }, 2) }))
      assert.is_true(gradcheck(function(x) return tide.diagflat(x, 1) end, { rnd({ 2, 2 }, 3) }))
      assert.has_error(function() return tide.block_diag(T(1), tide.ones(1, 1, 1)) end,
        "block_diag: tensor 2 must have at most 2 dimensions, got 3")
      assert.has_error(function() return tide.block_diag(T(1), 2) end,
        "block_diag: argument 2 must be a tensor, got number")
      assert.has_error(function() return tide.diagflat(T(1), 0.5) end, "diagflat: offset must be an integer, got 0.5")
    end)
  end)

  describe("NumPy's names", function()
    it("are the same functions, methods and in-place forms", function()
      for name, target in pairs { absolute = "abs", arccos = "acos", arcsin = "asin", arctan = "atan",
                                  arcsinh = "asinh", arccosh = "acosh", arctanh = "atanh", arctan2 = "atan2",
                                  clip = "clamp", multiply = "mul", subtract = "sub", negative = "neg",
                                  greater = "gt", greater_equal = "ge", less = "lt", less_equal = "le",
                                  not_equal = "ne", sgn = "sign", concat = "cat", concatenate = "cat" } do
        assert.are.equal(tide[target], tide[name], name)
        assert.are.equal(tide.Tensor[target], tide.Tensor[name], name)
        assert.are.equal(tide.Tensor[target .. "_"], tide.Tensor[name .. "_"], name)
      end
      H.close(T({ -0.5 }):arccos(), { math.acos(-0.5) })
      H.equal(T({ -1, 2 }):absolute_(), { 1, 2 })
      H.equal(tide.concat({ T({ 1 }), T({ 2 }) }), { 1, 2 })
      H.equal(T({ 1, 5 }):clip(2, 4), { 2, 4 })
      H.equal(tide.subtract(T({ 5 }), T({ 1 }), 2), { 3 })
      local x = T({ 1, -2 })
      assert.are.equal(x, tide.positive(x))
      assert.has_error(function() return T({ true }):positive() end, "positive: bool tensors are not supported")
    end)

    it("divide, with rounding modes", function()
      local a, b = T({ 7, -7, 7, -7 }), T({ 2, 2, -2, -2 })
      each_layout(a, function(x)
        H.equal(tide.divide(x, b), { 3.5, -3.5, -3.5, 3.5 })
        H.equal(tide.divide(x, b, { rounding_mode = "trunc" }), { 3, -3, -3, 3 })
        H.equal(x:divide(b, { rounding_mode = "floor" }), { 3, -4, -4, 3 })
      end)
      local ai, bi = I({ 7, -7, 7, -7, 6 }), I({ 2, 2, -2, -2, -3 })
      H.equal(tide.divide(ai, bi, { rounding_mode = "trunc" }), { 3, -3, -3, 3, -2 })
      H.equal(tide.divide(ai, bi, { rounding_mode = "floor" }), { 3, -4, -4, 3, -2 })
      assert.are.equal("int64", tide.divide(ai, bi, { rounding_mode = "trunc" }):dtype())
      assert.are.equal("float32", tide.divide(ai, bi):dtype())
      local y = T({ 7, -7 })
      y:divide_(2, { rounding_mode = "trunc" })
      H.equal(y, { 3, -3 })
      H.equal(T({ 1 }):divide_(4), { 0.25 })
      assert.has_error(function() return tide.divide(a, b, { rounding_mode = "round" }) end,
        "divide: rounding_mode must be 'trunc' or 'floor', got round")
      assert.has_error(function() return tide.divide(1, 2) end, "divide: at least one argument must be a tensor")
    end)
  end)

  describe("elementwise", function()
    it("signbit and copysign see -0.0", function()
      H.equal(tide.signbit(T({ -0.0, 0, -1, 1, -inf, inf })), { true, false, true, false, true, false })
      H.equal(I({ -3, 0, 4 }):signbit(), { true, false, false })
      H.equal(T({ true }):signbit(), { false })
      H.equal(tide.copysign(T({ 1, -2, 3, 4 }), T({ -0.0, 1, -1, 0 })), { -1, 2, -3, 4 })
      H.equal(tide.copysign(T({ 1, -2 }), -0.0), { -1, -2 })
      H.equal(tide.copysign(2, T({ -1, 1 })), { -2, 2 })
      assert.are.equal("float32", tide.copysign(I({ 1 }), I({ -1 })):dtype())
      assert.are.equal("float64", tide.copysign(T({ 1 }), D({ -1 })):dtype())
      local r = tide.copysign(T({ 0, 0 }), T({ -1, 1 }))
      H.equal(r:reciprocal(), { -inf, inf })   -- -0.0 and 0.0
      local x = T({ 1, 2 })
      x:copysign_(T({ -1, 1 }))
      H.equal(x, { -1, 2 })
      assert.has_error(function() return tide.copysign(1, 2) end, "copysign: at least one argument must be a tensor")
      assert.has_error(function() return tide.copysign(T({ 1 }), "a") end,
        "copysign: argument 2 must be a tensor or a number, got string")
      assert.is_true(gradcheck(function(a, b) return tide.copysign(a, b) end, { rnd({ 2, 3 }, 1), rnd({ 3 }, 2) }))
    end)

    it("sinc, float_power and logit", function()
      local v = { 0, 0.5, -1.25, 3 }
      local want = {}
      for i, x in ipairs(v) do want[i] = x == 0 and 1 or math.sin(math.pi * x) / (math.pi * x) end
      H.close(tide.sinc(D(v)), want, 1e-12, 1e-15)
      H.close(tide.sinc(I({ 0, 1 })), { 1, 0 }, 0, 1e-7)
      assert.are.equal("float32", I({ 0 }):sinc():dtype())
      local fp = tide.float_power(I({ 2, 3 }), 0.5)
      assert.are.equal("float64", fp:dtype())
      H.close(fp, { math.sqrt(2), math.sqrt(3) }, 1e-15)
      H.equal(tide.float_power(2, T({ 3, -1 })), { 8, 0.5 })
      local d = D({ 4 })
      d:float_power_(I({ 2 }))
      H.equal(d, { 16 })
      assert.has_error(function() return T({ 1 }):float_power_(2) end,
        "float_power_: the tensor must be float64 (the result's dtype), got float32")
      local p = { 0.1, 0.5, 0.9 }
      local lw = {}
      for i, x in ipairs(p) do lw[i] = math.log(x / (1 - x)) end
      H.close(tide.logit(D(p)), lw, 1e-12)
      H.close(D({ 0, 1 }):logit(0.25), { math.log(1 / 3), math.log(3) }, 1e-12)
      H.equal(tide.logit(T({ 0, 1 })), { -inf, inf })
      assert.has_error(function() return tide.logit(T({ 1 }), "a") end, "logit: eps must be a number, got string")
      local x = rnd({ 2, 3 }, 3)
      assert.is_true(gradcheck(tide.sinc, { x }))
      assert.is_true(gradcheck(function(a) return tide.sinc(a * 0) end, { x }))   -- at 0: slope 0
      assert.is_true(gradcheck(function(a, b) return tide.float_power(a:abs() + 0.5, b) end, { x, rnd({ 3 }, 4) }))
      assert.is_true(gradcheck(function(a) return tide.logit(a:sigmoid(), 0.2) end, { x }))
    end)
  end)

  it("elementwise functions keep empty and 0-d shapes", function()
    for _, x in ipairs { tide.zeros(0, 2, "float64"), D(0.25) } do
      local s = shape(x)
      for name, f in pairs {
        signbit = tide.signbit, sinc = tide.sinc, logit = tide.logit, positive = tide.positive,
        frexp = function(v) return (tide.frexp(v)) end, copysign = function(v) return tide.copysign(v, -1) end,
        float_power = function(v) return tide.float_power(v, 2) end, ldexp = function(v) return tide.ldexp(v, v) end,
        divide = function(v) return tide.divide(v, 2, { rounding_mode = "floor" }) end,
        gcd = function(v) return tide.gcd(v:to("int64"), 4) end,
        bitwise_and = function(v) return tide.bitwise_and(v:to("int64"), 3) end,
        bitwise_not = function(v) return tide.bitwise_not(v:to("int32")) end,
      } do
        assert.are.equal(s, shape(f(x)), name)
      end
    end
    H.equal(tide.sinc(D(0)), 1)
    H.equal(tide.copysign(D(2), D(-0.0)), -2)
    local m, e = tide.frexp(D(-6))
    H.equal(m, -0.75); H.equal(e, 3)
  end)

  it("the in-place forms carry gradients through a tensor autograd records", function()
    local function check(name, f, want_x, want_s)
      local x0, s = D({ { 1, 2 }, { 3, 4 } }):requires_grad_(), D({ { 5, 6 } }):requires_grad_()
      local x = x0 * 1
      assert.are.equal(x, f(x, s), name)
      local g = tide.autograd.grad((x * D({ { 1, 2 }, { 3, 4 } })):sum(), { x0, s }, nil, { allow_unused = true })
      H.equal(g[1], want_x, name)
      if want_s then H.equal(g[2], want_s, name) else assert.is_nil(g[2], name) end
    end
    check("index_fill_", function(x) return x:index_fill_(1, I({ 1 }), 0) end, { { 0, 0 }, { 3, 4 } })
    check("index_copy_", function(x, s) return x:index_copy_(1, I({ 2 }), s) end, { { 1, 2 }, { 0, 0 } }, { { 3, 4 } })
    check("index_put_", function(x, s) return x:index_put_({ I({ 2 }) }, s, true) end,
      { { 1, 2 }, { 3, 4 } }, { { 3, 4 } })
    check("masked_scatter_", function(x, s)
      return x:masked_scatter_(T({ { true, false } }):expand(2, 2), s:reshape(-1))
    end,
      { { 0, 2 }, { 0, 4 } }, { { 1, 3 } })
    check("scatter_reduce_", function(x, s) return x:scatter_reduce_(1, I({ { 2, 2 } }), s, "amax") end,
      { { 1, 2 }, { 0, 0 } }, { { 3, 4 } })
    check("renorm_", function(x) return x:renorm_(1, 1, 100) end, { { 1, 2 }, { 3, 4 } })
    check("addmm_", function(x, s) return x:addmm_(s:t(), s, { beta = 2 }) end, { { 2, 4 }, { 6, 8 } }, { { 40, 73 } })
    check("copysign_", function(x) return x:copysign_(-1) end, { { -1, -2 }, { -3, -4 } })
  end)

  describe("reductions", function()
    it("nansum and nanmean leave NaN out", function()
      local x = T({ { 1, nan, 3 }, { nan, nan, 2 } })
      each_layout(x, function(v)
        H.equal(tide.nansum(v), 6)
        H.equal(v:nansum(2), { 4, 2 })
        H.equal(tide.nanmean(v, 1), { 1, nan, 2.5 })
        H.equal(v:nanmean(2, true), { { 2 }, { 2 } })
      end)
      H.equal(tide.nansum(I({ 1, 2 })), 3)
      H.equal(tide.nansum(tide.zeros(0)), 0)
      H.equal(tide.nanmean(T(nan)), nan)
      H.equal(tide.nanmean(x, true), { { 2 } })
      assert.has_error(function() return tide.nanmean(I({ 1 })) end,
        "nanmean: input must be a floating-point tensor, got int64")
      assert.is_true(gradcheck(function(a) return tide.nanmean(a, 1) + tide.nansum(a, 1) end, { rnd({ 2, 3 }, 1) }))
    end)

    it("std_mean and var_mean", function()
      local x = D({ { 1, 2, 3, 4 }, { 2, 2, 2, 2 } })
      local s, m = tide.std_mean(x, 2)
      H.close(s, { math.sqrt(5 / 3), 0 }, 1e-12)
      H.equal(m, { 2.5, 2 })
      local v, m2 = tide.var_mean(x, 2, { correction = 0, keepdim = true })
      H.close(v, { { 1.25 }, { 0 } }, 1e-12)
      H.equal(m2, { { 2.5 }, { 2 } })
      local v2 = tide.var_mean(x, { unbiased = false })
      H.close(v2, tide.var(x, nil, false, 0), 1e-12)
      local v3, m3 = tide.var_mean(x, 1, true, 0)
      H.equal(v3, { { 0.25, 0, 0.25, 1 } })
      H.equal(m3, { { 1.5, 2, 2.5, 3 } })
      assert.has_error(function() return tide.std_mean(x, 1, { ddof = 1 }) end, "std_mean: unknown option 'ddof'")
      assert.has_error(function() return tide.var_mean(x, 1, { correction = 1, unbiased = true }) end,
        "var_mean: give correction or unbiased, not both")
      assert.is_true(gradcheck(function(a) local s1, m1 = tide.std_mean(a, 1); return { s1, m1 } end,
        { rnd({ 3, 2 }, 2) }))
    end)

    it("aminmax", function()
      local x = T({ { 3, -1, 2 }, { 0, 5, 5 } })
      each_layout(x, function(v)
        local lo, hi = v:aminmax()
        H.equal(lo, -1); H.equal(hi, 5)
        lo, hi = tide.aminmax(v, { dim = 2 })
        H.equal(lo, { -1, 0 }); H.equal(hi, { 3, 5 })
        lo, hi = tide.aminmax(v, { dim = 1, keepdim = true })
        H.equal(lo, { { 0, -1, 2 } }); H.equal(hi, { { 3, 5, 5 } })
      end)
      local lo, hi = tide.aminmax(x, { keepdim = true })
      assert.are.equal("1,1", shape(lo)); assert.are.equal("1,1", shape(hi))
      lo, hi = tide.aminmax(T(4), { dim = 1 })
      H.equal(lo, 4); H.equal(hi, 4)
      assert.has_error(function() return tide.aminmax(tide.zeros(0)) end,
        "aminmax: cannot compute aminmax of an empty tensor")
      assert.has_error(function() return tide.aminmax(tide.zeros(2, 0), { dim = 2 }) end,
        "aminmax: cannot compute aminmax over dimension 2, of size 0")
    end)
  end)

  describe("indexing", function()
    it("take and take_along_dim", function()
      local x = T({ { 1, 2, 3 }, { 4, 5, 6 } })
      each_layout(x, function(v)
        H.equal(tide.take(v, I({ { 1, -1 }, { 4, 2 } })), { { 1, 6 }, { 4, 2 } })
        H.equal(v:take_along_dim(I({ { 3, 1 }, { 2, 2 } }), 2), { { 3, 1 }, { 5, 5 } })
      end)
      H.equal(tide.take(T(7), I({ 1, 1 })), { 7, 7 })
      assert.are.equal("0", shape(tide.take(x, I({}))))
      H.equal(tide.take_along_dim(x, I({ 6, 1 })), { 6, 1 })
      -- broadcast outside dim
      H.equal(tide.take_along_dim(x, I({ { 2 } }), 2), { { 2 }, { 5 } })
      H.equal(tide.take_along_dim(T({ { 1, 2, 3 } }), I({ { 3 }, { 1 } }), 2), { { 3 }, { 1 } })
      local _, idx = x:sort(2, true)
      H.equal(tide.take_along_dim(x, idx, 2), { { 3, 2, 1 }, { 6, 5, 4 } })
      assert.has_error(function() return tide.take(x, T({ 1 })) end,
        "take: index must be an integer tensor, got float32")
      assert.has_error(function() return tide.take_along_dim(x, I({ 1 }), 1) end,
        "take_along_dim: input and indices must have the same number of dimensions, got 2 and 1")
      assert.is_true(gradcheck(function(a) return tide.take(a, I({ 1, 1, -1 })) end, { rnd({ 2, 2 }, 1) }))
      assert.is_true(gradcheck(function(a) return tide.take_along_dim(a, I({ { 2 } }), 2) end, { rnd({ 3, 2 }, 2) }))
    end)

    it("index_fill and index_fill_", function()
      each_layout(tide.zeros(2, 3), function(v)
        H.equal(tide.index_fill(v, 2, I({ 1, -1 }), 7), { { 7, 0, 7 }, { 7, 0, 7 } })
        H.equal(v:index_fill(1, I(2), T(-1)), { { 0, 0, 0 }, { -1, -1, -1 } })
      end)
      H.equal(tide.index_fill(I({ 1, 2 }), 1, I({ 2 }), 1.5), { 1, 1 })
      H.equal(tide.index_fill(T(3), 1, I({ 1 }), 5), 5)
      H.equal(tide.index_fill(T({ 1, 2 }), 1, I({}), 5), { 1, 2 })
      local x = tide.zeros(2, 2)
      assert.are.equal(x, x:index_fill_(-1, I({ 2 }), 4))
      H.equal(x, { { 0, 4 }, { 0, 4 } })
      x:index_fill_(1, I({ 1 }), T(9))
      H.equal(x, { { 9, 9 }, { 0, 4 } })
      assert.has_error(function() return tide.index_fill(x, 1, I({ { 1 } }), 1) end,
        "index_fill: index must be 0-d or 1-d, got 2-d")
      assert.has_error(function() return tide.index_fill(x, 1, I({ 1 }), T({ 1 })) end,
        "index_fill: value must be a number or a 0-d tensor, got a 1-d tensor")
      assert.has_error(function() return tide.index_fill(x, nil, I({ 1 }), 1) end,
        "index_fill: a dimension is required")
      assert.has_error(function() return tide.index_fill(x, 3, I({ 1 }), 1) end,
        "index_fill: dimension 3 is out of range for a 2-d tensor")
      assert.is_true(gradcheck(function(a, v) return tide.index_fill(a, 2, I({ 2 }), v) end,
        { rnd({ 2, 3 }, 1), D(2):requires_grad_() }))
    end)

    it("index_copy and index_copy_", function()
      local src = T({ { 1, 2 }, { 3, 4 } })
      each_layout(tide.zeros(3, 2), function(v)
        H.equal(tide.index_copy(v, 1, I({ 3, 1 }), src), { { 3, 4 }, { 0, 0 }, { 1, 2 } })
      end)
      H.equal(tide.zeros(2, 3):index_copy(2, I({ 2, 3 }), src:t()), { { 0, 1, 3 }, { 0, 2, 4 } })
      H.equal(tide.index_copy(T(0), 1, I({ 1 }), T(5)), 5)
      local x = tide.zeros(2, 2)
      assert.are.equal(x, x:index_copy_(2, I({ 2 }), T({ { 5 }, { 6 } })))
      H.equal(x, { { 0, 5 }, { 0, 6 } })
      assert.has_error(function() return tide.index_copy(x, 1, I({ 1, 2 }), tide.ones(2, 3)) end,
        "index_copy: source must have shape [2,2], got [2,3]")
      assert.has_error(function() return tide.index_copy(x, 1, I({ 1 }), D({ { 1, 2 } })) end,
        "index_copy: source must have the tensor's dtype float32, got float64")
      assert.is_true(gradcheck(function(a, s) return tide.index_copy(a, 2, I({ 3, 1 }), s) end,
        { rnd({ 2, 3 }, 1), rnd({ 2, 2 }, 2) }))
    end)

    it("index_put and index_put_", function()
      each_layout(tide.zeros(3, 3), function(v)
        H.equal(tide.index_put(v, { I({ 1, 3 }), I({ 2, -1 }) }, T({ 5, 6 })),
          { { 0, 5, 0 }, { 0, 0, 0 }, { 0, 0, 6 } })
        H.equal(v:index_put({ I({ 2 }) }, T({ 1, 2, 3 })), { { 0, 0, 0 }, { 1, 2, 3 }, { 0, 0, 0 } })
      end)
      -- indices broadcast together; values broadcast to them
      H.equal(tide.index_put(tide.zeros(2, 3), { I({ { 1 }, { 2 } }), I({ 1, 3 }) }, 7), { { 7, 0, 7 }, { 7, 0, 7 } })
      H.equal(tide.index_put(tide.zeros(3), { I({ 1, 1, 2 }) }, T(1), true), { 2, 1, 0 })
      H.equal(tide.index_put(tide.zeros(2, 2), { T({ { true, false }, { false, true } }) }, 9), { { 9, 0 }, { 0, 9 } })
      H.equal(tide.index_put(tide.zeros(2, 2), { T({ false, true }) }, T({ 1, 2 })), { { 0, 0 }, { 1, 2 } })
      H.equal(tide.index_put(T({ 1, 2 }), { I({}) }, 5), { 1, 2 })
      local x = I({ 1, 2, 3 })
      assert.are.equal(x, x:index_put_({ I({ 3, 3 }) }, I({ 10, 20 }), true))
      H.equal(x, { 1, 2, 33 })
      assert.has_error(function() return tide.index_put(tide.zeros(3), { I({ 1, 4 }) }, 1) end,
        "index_put: index 4 is out of range for dimension 1 of size 3")
      assert.has_error(function() return tide.index_put(tide.zeros(3), { I({ -4 }) }, 1) end,
        "index_put: index -4 is out of range for dimension 1 of size 3")
      assert.has_error(function() return tide.index_put(tide.zeros(3), { I({ 1 }), I({ 1 }) }, 1) end,
        "index_put: too many indices for a 1-d tensor: 2")
      assert.has_error(function() return tide.index_put(tide.zeros(3), { I({ 1 }) }, I({ 1 })) end,
        "index_put: values must have the tensor's dtype float32, got int64")
      assert.has_error(function() return tide.index_put(tide.zeros(3), { I({ 1, 2 }) }, T({ 1, 2, 3 })) end,
        "index_put: values of shape [3] cannot be broadcast to the indexed shape [2]")
      assert.has_error(function() return tide.index_put(tide.zeros(3), I({ 1 }), 1) end,
        "index_put: indices must be a table of tensors, got a tensor")
      assert.has_error(function() return tide.index_put(tide.zeros(3), { T({ 1 }) }, 1) end,
        "index_put: index 1 must be an integer tensor, got float32")
      assert.is_true(gradcheck(function(a, v) return tide.index_put(a, { I({ 1, 2 }), I({ 2, 2 }) }, v, true) end,
        { rnd({ 2, 2 }, 1), rnd({ 2 }, 2) }))
      assert.is_true(gradcheck(function(a, v) return tide.index_put(a, { I({ 2 }) }, v) end,
        { rnd({ 2, 2 }, 3), rnd({ 2 }, 4) }))
    end)

    it("scatter_reduce: sum, mean, prod, amax, amin", function()
      local idx, src = I({ 1, 3, 1, 3 }), T({ 5, -1, 2, -7 })
      local x = T({ 2, 2, 2 })
      H.equal(tide.scatter_reduce(x, 1, idx, src, "sum"), { 9, 2, -6 })
      H.equal(tide.scatter_reduce(x, 1, idx, src, "sum", { include_self = false }), { 7, 2, -8 })
      H.equal(tide.scatter_reduce(x, 1, idx, src, "mean"), { 3, 2, -2 })
      H.equal(tide.scatter_reduce(x, 1, idx, src, "mean", { include_self = false }), { 3.5, 2, -4 })
      H.equal(tide.scatter_reduce(x, 1, idx, src, "prod"), { 20, 2, 14 })
      H.equal(tide.scatter_reduce(x, 1, idx, src, "prod", { include_self = false }), { 10, 2, 7 })
      H.equal(tide.scatter_reduce(x, 1, idx, src, "amax"), { 5, 2, 2 })
      H.equal(tide.scatter_reduce(x, 1, idx, src, "amax", { include_self = false }), { 5, 2, -1 })
      H.equal(tide.scatter_reduce(x, 1, idx, src, "amin"), { 2, 2, -7 })
      H.equal(tide.scatter_reduce(x, 1, idx, src, "amin", { include_self = false }), { 2, 2, -7 })
      -- integers: the mean floored
      H.equal(tide.scatter_reduce(I({ 0, 0 }), 1, I({ 1, 1, 2 }), I({ 1, 2, -3 }), "mean", { include_self = false }),
        { 1, -3 })
      -- NaN propagates; 2-d along dim 2, a smaller index and a larger src
      H.equal(tide.scatter_reduce(T({ 0, 0 }), 1, I({ 1, 1 }), T({ nan, 1 }), "amin"), { nan, 0 })
      local X = T({ { 0, 0, 0 }, { 1, 1, 1 }, { 9, 9, 9 } })
      local S = T({ { 1, 2, 3, 4 }, { 5, 6, 7, 8 } })
      local ix = I({ { 3, 3, 1 }, { 2, 1, 2 } })
      each_layout(S, function(s)
        H.equal(tide.scatter_reduce(X, 2, ix, s, "amax", { include_self = false }),
          { { 3, 0, 2 }, { 6, 7, 1 }, { 9, 9, 9 } })
        H.equal(X:scatter_reduce(2, ix, s, "sum"), { { 3, 0, 3 }, { 7, 13, 1 }, { 9, 9, 9 } })
      end)
      H.equal(tide.scatter_reduce(T(1), 1, I(1), T(3), "prod"), 3)
      H.equal(tide.scatter_reduce(T({ 1 }), 1, I({}), T({}), "amax"), { 1 })
      local y = T({ 1, 1 })
      assert.are.equal(y, y:scatter_reduce_(1, I({ 2, 2 }), T({ 3, 4 }), "amax"))
      H.equal(y, { 1, 4 })
    end)

    it("scatter_reduce: errors and gradients", function()
      local x = T({ 1, 2 })
      assert.has_error(function() return tide.scatter_reduce(x, 1, I({ 1 }), T({ 1 }), "max") end,
        "scatter_reduce: reduce must be 'sum', 'prod', 'mean', 'amax' or 'amin', got max")
      assert.has_error(function() return tide.scatter_reduce(x, 1, T({ 1 }, "int32"), T({ 1 }), "sum") end,
        "scatter_reduce: index must be an int64 tensor, got int32")
      assert.has_error(function() return tide.scatter_reduce(x, 1, I({ 1, 1 }), T({ 1 }), "sum") end,
        "scatter_reduce: index of shape [2] must be no larger than src [1], nor than the tensor [2] outside dimension 1")
      assert.has_error(function() return tide.scatter_reduce(x, 1, I({ 1 }), D({ 1 }), "sum") end,
        "scatter_reduce: src must have the tensor's dtype float32, got float64")
      assert.has_error(function() return tide.scatter_reduce(x, 1, I({ { 1 } }), T({ 1 }), "sum") end,
        "scatter_reduce: index, src and the tensor must have the same number of dimensions, got 2, 1 and 1")
      assert.has_error(function() return tide.scatter_reduce(x, 1, I({ 1 }), T({ 1 }), "sum", { self = true }) end,
        "scatter_reduce: unknown option 'self'")
      local a, s = rnd({ 2, 3 }, 1), rnd({ 2, 4 }, 2)
      local ix = I({ { 1, 3, 1, 2 }, { 2, 2, 3, 3 } })
      for _, how in ipairs { "sum", "mean", "prod", "amax", "amin" } do
        for _, self_too in ipairs { true, false } do
          assert.is_true(gradcheck(function(p, q)
            return tide.scatter_reduce(p, 2, ix, q, how, { include_self = self_too })
          end, { a, s }), how)
        end
      end
    end)

    it("masked_scatter", function()
      each_layout(tide.zeros(2, 3), function(v)
        H.equal(tide.masked_scatter(v, T({ { true, false, true }, { false, true, false } }), T({ 1, 2, 3, 4 })),
          { { 1, 0, 2 }, { 0, 3, 0 } })
        H.equal(v:masked_scatter(T({ { true }, { false } }), T({ { 5, 6, 7 } })), { { 5, 6, 7 }, { 0, 0, 0 } })
      end)
      H.equal(tide.masked_scatter(T({ 1, 2 }), T({ false, false }), T({})), { 1, 2 })
      H.equal(tide.masked_scatter(T(1), T(true), T({ 4 })), 4)
      local x = T({ 1, 2, 3 })
      assert.are.equal(x, x:masked_scatter_(T({ true, false, true }), T({ 8, 9 })))
      H.equal(x, { 8, 2, 9 })
      assert.has_error(function() return tide.masked_scatter(x, T({ true, true, true }), T({ 1, 2 })) end,
        "masked_scatter: the mask selects 3 elements but source has only 2")
      assert.has_error(function() return tide.masked_scatter(x, T({ 1, 0, 1 }), T({ 1, 2 })) end,
        "masked_scatter: mask must be a bool tensor, got float32")
      assert.has_error(function() return tide.masked_scatter(x, T({ true, false }), T({ 1, 2 })) end,
        "masked_scatter: mask of shape [2] cannot be broadcast to the tensor's shape [3]")
      assert.has_error(function() return tide.masked_scatter(x, T({ { true } }), T({ 1, 2 })) end,
        "masked_scatter: mask of shape [1,1] cannot be broadcast to the tensor's shape [3]")
      assert.is_true(gradcheck(function(a, s)
        return tide.masked_scatter(a, T({ { true, false }, { false, true } }), s)
      end,
        { rnd({ 2, 2 }, 1), rnd({ 3 }, 2) }))
    end)

    it("select_scatter, slice_scatter and diagonal_scatter", function()
      each_layout(tide.zeros(2, 3), function(v)
        H.equal(tide.select_scatter(v, T({ 1, 2 }), 2, -1), { { 0, 0, 1 }, { 0, 0, 2 } })
        H.equal(v:select_scatter(T({ 1, 2, 3 }), 1, 1), { { 1, 2, 3 }, { 0, 0, 0 } })
        H.equal(tide.slice_scatter(v, tide.ones(2, 2), 2, 1, -1, 2), { { 1, 0, 1 }, { 1, 0, 1 } })
        H.equal(v:slice_scatter(tide.ones(1, 3), 1, 2), { { 0, 0, 0 }, { 1, 1, 1 } })
        H.equal(tide.diagonal_scatter(v, T({ 1, 2 }), 1), { { 0, 1, 0 }, { 0, 0, 2 } })
      end)
      H.equal(tide.select_scatter(I({ 1, 2 }), T(7.9), 1, 2), { 1, 7 })
      H.equal(tide.slice_scatter(tide.zeros(5), T({ 1, 2 }), 1, 2, 3), { 0, 1, 2, 0, 0 })
      H.equal(tide.slice_scatter(tide.zeros(5), T({ 1, 2 }), 1, -2), { 0, 0, 0, 1, 2 })
      H.equal(tide.slice_scatter(tide.zeros(3), T({}), 1, 3, 2), { 0, 0, 0 })
      H.equal(tide.slice_scatter(tide.zeros(3), T({ 1, 1, 1 }), 1, -10, 10), { 1, 1, 1 })
      H.equal(tide.diagonal_scatter(tide.zeros(3, 4), T({ 1, 2 }), -1),
        { { 0, 0, 0, 0 }, { 1, 0, 0, 0 }, { 0, 2, 0, 0 } })
      H.equal(tide.diagonal_scatter(tide.zeros(2, 2, 3), T({ { 1, 2 }, { 3, 4 }, { 5, 6 } }), 0, 1, 2),
        { { { 1, 3, 5 }, { 0, 0, 0 } }, { { 0, 0, 0 }, { 2, 4, 6 } } })
      H.equal(tide.diagonal_scatter(tide.zeros(2, 2), T({ 5, 6 }), 0, 2, 1), { { 5, 0 }, { 0, 6 } })
      H.equal(tide.diagonal_scatter(tide.ones(2, 2), T({}), 3), { { 1, 1 }, { 1, 1 } })
      assert.has_error(function() return tide.select_scatter(tide.zeros(2, 3), T({ 1, 2 }), 2, 4) end,
        "select_scatter: index 4 is out of range for dimension 2 of size 3")
      assert.has_error(function() return tide.select_scatter(tide.zeros(2, 3), T({ 1, 2, 3 }), 2, 1) end,
        "select_scatter: src must have shape [2] (the selected slice's), got [3]")
      assert.has_error(function() return tide.slice_scatter(tide.zeros(3), T({ 1 }), 1, 1, 3, 0) end,
        "slice_scatter: step must be a positive integer, got 0")
      assert.has_error(function() return tide.slice_scatter(tide.zeros(3), T({ 1 }), 1, 0) end,
        "slice_scatter: start must be a 1-based index, got 0")
      assert.has_error(function() return tide.slice_scatter(tide.zeros(3), T({ 1 }), 1, 1, 3, 2) end,
        "slice_scatter: src must have shape [2] (the slice's), got [1]")
      assert.has_error(function() return tide.diagonal_scatter(tide.zeros(2, 3), T({ 1, 2, 3 })) end,
        "diagonal_scatter: src must have shape [2] (the diagonal's), got [3]")
      assert.has_error(function() return tide.diagonal_scatter(tide.zeros(2), T({ 1 })) end,
        "diagonal_scatter: expected a tensor of at least 2 dimensions, got 1")
      assert.has_error(function() return tide.diagonal_scatter(tide.zeros(2, 2), T({ 1 }), 0, 1, -2) end,
        "diagonal_scatter: dim1 and dim2 must be different, got 1 and -2")
      local a = rnd({ 3, 4 }, 1)
      assert.is_true(gradcheck(function(p, q) return tide.select_scatter(p, q, 2, 2) end, { a, rnd({ 3 }, 2) }))
      assert.is_true(gradcheck(function(p, q) return tide.slice_scatter(p, q, 2, 1, 4, 3) end, { a, rnd({ 3, 2 }, 3) }))
      assert.is_true(gradcheck(function(p, q) return tide.slice_scatter(p, q, 1, 2) end, { a, rnd({ 2, 4 }, 4) }))
      assert.is_true(gradcheck(function(p, q) return tide.diagonal_scatter(p, q, -1) end, { a, rnd({ 2 }, 5) }))
    end)
  end)

  describe("counting and statistics", function()
    it("bincount", function()
      H.equal(tide.bincount(I({ 0, 2, 2, 5 })), { 1, 0, 2, 0, 0, 1 })
      H.equal(I({ 1 }):bincount(nil, 4), { 0, 1, 0, 0 })
      H.equal(tide.bincount(I({}), nil, 2), { 0, 0 })
      local w = tide.bincount(T({ 1, 0, 1 }, "int32"), T({ 0.5, 1, 2 }))
      H.equal(w, { 1, 2.5 })
      assert.are.equal("float32", w:dtype())
      assert.are.equal("float64", tide.bincount(I({ 1 }), I({ 3 })):dtype())
      assert.are.equal("int64", tide.bincount(I({ 1 })):dtype())
      assert.has_error(function() return tide.bincount(I({ 1, -1 })) end,
        "bincount: input must be non-negative, got -1")
      assert.has_error(function() return tide.bincount(I({ { 1 } })) end, "bincount: input must be 1-d, got 2-d")
      assert.has_error(function() return tide.bincount(T({ 1 })) end,
        "bincount: input must be an integer tensor, got float32")
      assert.has_error(function() return tide.bincount(I({ 1 }), T({ 1, 2 })) end,
        "bincount: weights must be 1-d with one weight per element (1), got shape [2]")
      assert.has_error(function() return tide.bincount(I({ 1 }), nil, -1) end,
        "bincount: minlength must be a non-negative integer, got -1")
    end)

    it("histc", function()
      each_layout(T({ { 1, 2, 1, 4 }, { 0, 3.99, 5, -1 } }), function(v)
        H.equal(tide.histc(v, 4, 0, 4), { 1, 2, 1, 2 })
      end)
      H.equal(T({ 1, 2, 3 }):histc(2), { 1, 2 })              -- min = max = 0: the data's range
      H.equal(tide.histc(T({ 2, 2 }), 4), { 0, 0, 2, 0 })      -- all equal: [1, 3]
      H.equal(tide.histc(D({ 0.5, nan, inf }), 2, 0, 1), { 0, 1 })
      H.equal(tide.histc(tide.zeros(0), 3), { 0, 0, 0 })
      assert.has_error(function() return tide.histc(T({ 1 }), 2, 3, 1) end,
        "histc: max must be larger than min, got min 3 and max 1")
      assert.has_error(function() return tide.histc(I({ 1 })) end,
        "histc: input must be a floating-point tensor, got int64")
      assert.has_error(function() return tide.histc(T({ 1 }), 0) end, "histc: bins must be a positive integer, got 0")
      assert.has_error(function() return tide.histc(T({ 1, inf })) end, "histc: the range [1, inf] is not finite")
    end)

    it("isin", function()
      each_layout(T({ { 1, 2, 3 }, { 4, nan, 2 } }), function(v)
        H.equal(tide.isin(v, T({ 4, 2, nan })), { { false, true, false }, { true, false, true } })
      end)
      H.equal(tide.isin(I({ 1, 2 }), T({ 2.0 }), { invert = true }), { true, false })
      H.equal(tide.isin(I({ 1, 2 }), 2), { false, true })
      assert.is_true(tide.isin(2.5, T({ 2.5, 1 })):item())
      H.equal(tide.isin(T({ 1 }), T({})), { false })
      H.equal(tide.isin(T({ true, false }), T({ true })), { true, false })
      assert.has_error(function() return tide.isin(1, 2) end, "isin: at least one argument must be a tensor")
      assert.has_error(function() return tide.isin(T({ 1 }), "a") end,
        "isin: argument 2 must be a tensor or a number, got string")
    end)

    it("mode", function()
      local x = T({ { 1, 2, 2, 3, 3 }, { 5, 5, 1, 1, 0 } })
      each_layout(x, function(v)
        local m, i = v:mode()
        H.equal(m, { 2, 1 }); H.equal(i, { 3, 4 })
        m, i = tide.mode(v, 1, true)
        H.equal(m, { { 1, 2, 1, 1, 0 } }); H.equal(i, { { 1, 1, 2, 2, 2 } })
      end)
      local m, i = tide.mode(T(4))
      H.equal(m, 4); H.equal(i, 1)
      m, i = tide.mode(I({ 7 }))
      H.equal(m, 7); H.equal(i, 1)
      m = tide.mode(T({ nan, nan, 1 }))
      H.equal(m, 1)   -- NaNs are all different
      assert.has_error(function() return tide.mode(tide.zeros(2, 0)) end,
        "mode: cannot take the mode of dimension 2, of size 0")
      assert.is_true(gradcheck(function(a) return (tide.mode(a:round(), 2) + 0) * a:sum() end,
        { D({ { 1, 2, 2 } }):requires_grad_() }))
    end)

    it("cov and corrcoef", function()
      -- a plain-Lua reference: weighted covariance as NumPy defines it
      local function ref_cov(X, fw, aw, corr)
        local n = #X[1]
        local w = {}
        for j = 1, n do w[j] = (fw and fw[j] or 1) * (aw and aw[j] or 1) end
        local ws, wa = 0, 0
        for j = 1, n do ws = ws + w[j]; wa = wa + w[j] * (aw and aw[j] or 1) end
        local avg = {}
        for i = 1, #X do
          local s = 0
          for j = 1, n do s = s + X[i][j] * w[j] end
          avg[i] = s / ws
        end
        local norm = (corr == 0) and ws or (aw and ws - corr * wa / ws or ws - corr)
        local c = {}
        for i = 1, #X do
          c[i] = {}
          for k = 1, #X do
            local s = 0
            for j = 1, n do s = s + (X[i][j] - avg[i]) * (X[k][j] - avg[k]) * w[j] end
            c[i][k] = s / norm
          end
        end
        return c
      end
      local X = H.nest(H.values(8, -2, 2, 7), { 2, 4 })
      each_layout(D(X), function(v)
        H.close(tide.cov(v), ref_cov(X, nil, nil, 1), 1e-12)
        H.close(v:cov({ correction = 0, fweights = I({ 1, 2, 0, 3 }) }), ref_cov(X, { 1, 2, 0, 3 }, nil, 0), 1e-12)
        H.close(tide.cov(v, { fweights = I({ 1, 2, 1, 3 }), aweights = D({ 0.5, 1, 2, 0.25 }) }),
          ref_cov(X, { 1, 2, 1, 3 }, { 0.5, 1, 2, 0.25 }, 1), 1e-12)
        H.close(tide.cov(v, { aweights = D({ 0.5, 1, 2, 0.25 }), correction = 2 }),
          ref_cov(X, nil, { 0.5, 1, 2, 0.25 }, 2), 1e-12)
      end)
      H.close(tide.cov(T({ 1, 2, 3, 4 })), 5 / 3, 1e-6)
      assert.are.equal("", shape(tide.cov(T({ { 1, 2 } }))))
      assert.are.equal("float32", tide.cov(I({ 1, 2 })):dtype())
      local c = ref_cov(X, nil, nil, 1)
      local r = c[1][2] / math.sqrt(c[1][1] * c[2][2])
      H.close(tide.corrcoef(D(X)), { { 1, r }, { r, 1 } }, 1e-12)
      H.equal(tide.corrcoef(T({ 1, 2, 4 })), 1)
      assert.has_error(function() return tide.cov(tide.ones(1, 1, 1)) end,
        "cov: expected a tensor of at most 2 dimensions, got 3")
      assert.has_error(function() return tide.cov(D(X), { fweights = T({ 1, 1, 1, 1 }) }) end,
        "cov: fweights must be an integer tensor, got float32")
      assert.has_error(function() return tide.cov(D(X), { aweights = I({ 1, 1, 1, 1 }) }) end,
        "cov: aweights must be a floating-point tensor, got int64")
      assert.has_error(function() return tide.cov(D(X), { aweights = D({ 1, -1, 1, 1 }) }) end,
        "cov: aweights cannot be negative")
      assert.has_error(function() return tide.cov(D(X), { fweights = I({ 1, 1 }) }) end,
        "cov: fweights must have one weight per observation (4), got 2")
      assert.has_error(function() return tide.cov(D(X), { correction = 0.5 }) end,
        "cov: correction must be an integer, got 0.5")
      assert.is_true(gradcheck(function(a) return tide.cov(a, { aweights = D({ 1, 2, 1 }) }) end, { rnd({ 2, 3 }, 1) }))
      assert.is_true(gradcheck(function(a) return tide.corrcoef(a):narrow(1, 1, 1):narrow(2, 2, 1) end,
        { rnd({ 2, 3 }, 2) }))
    end)

    it("trapezoid, trapz and cumulative_trapezoid", function()
      local y = T({ { 1, 2, 3 }, { 0, 4, 2 } })
      each_layout(y, function(v)
        H.equal(tide.trapezoid(v), { 4, 5 })
        H.equal(tide.trapz(v, { dim = 1, dx = 2 }), { 1, 6, 5 })
        H.equal(tide.trapezoid(v, T({ 0, 1, 3 })), { 6.5, 8 })
        H.equal(tide.cumulative_trapezoid(v, T({ { 0, 1, 3 } })), { { 1.5, 6.5 }, { 2, 8 } })
      end)
      H.equal(tide.trapezoid(T({ 5 })), 0)
      H.equal(tide.trapezoid(tide.zeros(2, 0)), { 0, 0 })
      assert.are.equal("2,0", shape(tide.cumulative_trapezoid(tide.ones(2, 1))))
      assert.are.equal("float32", tide.trapezoid(I({ 1, 2 })):dtype())
      assert.has_error(function() return tide.trapezoid(y, T({ 1, 2 })) end,
        "trapezoid: x has 2 elements but dimension 2 of y has size 3")
      assert.has_error(function() return tide.trapezoid(y, T({ 1, 2, 3 }), { dx = 1 }) end,
        "trapezoid: give x or dx, not both")
      assert.has_error(function() return tide.trapz(T(1)) end, "trapz: y must have at least 1 dimension, got 0")
      assert.has_error(function() return tide.cumulative_trapezoid(y, { dx = "a" }) end,
        "cumulative_trapezoid: dx must be a number, got string")
      local a, b = rnd({ 2, 3 }, 1), rnd({ 3 }, 2)
      assert.is_true(gradcheck(function(p, q) return tide.trapezoid(p, q) end, { a, b }))
      assert.is_true(gradcheck(function(p, q) return tide.cumulative_trapezoid(p, q) end, { a, b }))
    end)

    it("logcumsumexp", function()
      local x = D({ { -1000, 0, 1000, 1 }, { 1, 2, 3, -inf } })
      local function ref(row)
        local r, m = {}, -inf
        for i = 1, #row do
          local mx = math.max(m, row[i])
          m = mx == -inf and -inf or mx + math.log(math.exp(m - mx) + math.exp(row[i] - mx))
          r[i] = m
        end
        return r
      end
      each_layout(x, function(v)
        H.close(tide.logcumsumexp(v, 2), { ref({ -1000, 0, 1000, 1 }), ref({ 1, 2, 3, -inf }) }, 1e-14)
      end)
      H.close(tide.logcumsumexp(D({ { 1 }, { 2 }, { 3 } }), 1),
        { { 1 }, { ref({ 1, 2 })[2] }, { ref({ 1, 2, 3 })[3] } }, 1e-14)
      H.equal(tide.logcumsumexp(T(3), 1), 3)
      assert.are.equal("0", shape(tide.logcumsumexp(tide.zeros(0), 1)))
      H.equal(tide.logcumsumexp(D({ -inf, -inf, inf }), 1), { -inf, -inf, inf })
      assert.has_error(function() return tide.logcumsumexp(x) end, "logcumsumexp: a dimension is required")
      assert.has_error(function() return tide.logcumsumexp(I({ 1 }), 1) end,
        "logcumsumexp: input must be a floating-point tensor, got int64")
      assert.is_true(gradcheck(function(a) return tide.logcumsumexp(a, 2) end, { rnd({ 2, 5 }, 1) }))
    end)

    it("renorm and dist", function()
      local x = D({ { 3, 4 }, { 0.3, 0.4 }, { 0, -6 } })
      each_layout(x, function(v)
        H.close(tide.renorm(v, 2, 1, 1), { { 0.6, 0.8 }, { 0.3, 0.4 }, { 0, -1 } }, 1e-6)
        local k = 3.3 / 10.4   -- column 2's 1-norm is 10.4; column 1's is 3.3, not above
        H.close(v:renorm(1, 2, 3.3), { { 3, 4 * k }, { 0.3, 0.4 * k }, { 0, -6 * k } }, 1e-6)
      end)
      local y = x:clone()
      y:renorm_(2, 1, 1)
      H.close(y, { { 0.6, 0.8 }, { 0.3, 0.4 }, { 0, -1 } }, 1e-6)
      H.close(tide.dist(D({ 1, 2 }), D({ 4, 6 })), 5, 1e-15)
      H.close(tide.dist(D({ { 1 }, { 2 } }), D({ 0, 3 }), 1), 6, 1e-15)
      H.equal(T({ 1, -3 }):dist(T({ 0, 0 }), math.huge), 3)
      assert.has_error(function() return tide.renorm(x, 0, 1, 1) end, "renorm: p must be a positive number, got 0")
      assert.has_error(function() return tide.renorm(x, 2, 1, -1) end,
        "renorm: maxnorm must be a non-negative number, got -1")
      assert.has_error(function() return tide.renorm(D({ 1 }), 2, 1, 1) end,
        "renorm: input needs at least 2 dimensions, got 1")
      assert.has_error(function() return tide.dist(I({ 1 }), I({ 2 })) end,
        "dist: input must be a floating-point tensor, got int64")
      assert.is_true(gradcheck(function(a) return tide.renorm(a, 2, 2, 1.5) end, { rnd({ 2, 3 }, 1) }))
      assert.is_true(gradcheck(function(a, b) return tide.dist(a, b, 3) end, { rnd({ 2, 3 }, 2), rnd({ 3 }, 3) }))
    end)
  end)

  describe("creation", function()
    it("logspace and range", function()
      H.close(tide.logspace(0, 2, 3), { 1, 10, 100 }, 1e-6)
      local l = tide.logspace(-1, 1, 3, 2, "float64")
      H.equal(l, { 0.5, 1, 2 })
      assert.are.equal("float64", l:dtype())
      assert.are.equal("0", shape(tide.logspace(0, 1, 0)))
      H.equal(tide.range(1, 2, 0.5), { 1, 1.5, 2 })
      H.equal(tide.range(3, 1, -1, { dtype = "int64" }), { 3, 2, 1 })
      assert.are.equal("float32", tide.range(1, 3):dtype())
      H.equal(tide.range(1, 1), { 1 })
      H.close(tide.range(0, 1, 0.3), { 0, 0.3, 0.6, 0.9 }, 1e-7)
      assert.has_error(function() return tide.range(1, 2, 0) end, "range: step must be nonzero")
      assert.has_error(function() return tide.range(1, 0) end,
        "range: end 0 cannot be reached from start 1 with step 1")
      assert.has_error(function() return tide.logspace(0, 1, -1) end,
        "logspace: steps must be a non-negative integer, got -1")
      assert.has_error(function() return tide.logspace(0, 1, 2, { dtyp = "float64" }) end,
        "logspace: unknown option 'dtyp'")
    end)

    it("randint_like and normal", function()
      local x = tide.zeros(2, 3, "int32")
      local r = tide.randint_like(x, 5)
      assert.are.equal("2,3", shape(r))
      assert.are.equal("int32", r:dtype())
      assert.are.equal(x:device(), r:device())
      assert.is_true(r:ge(0):all():item() and r:lt(5):all():item())
      local f = tide.randint_like(x, -3, -1, "float64")
      assert.are.equal("float64", f:dtype())
      assert.is_true(f:ge(-3):all():item() and f:lt(-1):all():item())
      H.equal(f, f:floor())
      tide.manual_seed(1)
      local n = tide.normal(tide.full({ 2000 }, 3), T({ 0.5 }))
      assert.are.equal("2000", shape(n))
      assert.is_true(math.abs(n:mean():item() - 3) < 0.1)
      assert.is_true(math.abs(n:std():item() - 0.5) < 0.05)
      H.equal(tide.normal(T({ 1, 2 }), 0), { 1, 2 })
      H.equal(tide.normal(5, tide.zeros(2, 1, "float64")), { { 5 }, { 5 } })
      assert.are.equal("float64", tide.normal(5, tide.zeros(1, "float64")):dtype())
      assert.are.equal("3,2", shape(tide.normal(0, 1, { 3, 2 })))
      local mu = D({ 1, 2 }):requires_grad_()
      assert.is_false(tide.normal(mu, 1).requires_grad)
      assert.has_error(function() return tide.normal(0, -1, { 2 }) end, "normal: std must be non-negative, got -1")
      assert.has_error(function() return tide.normal(0, T({ -1 })) end, "normal: std must be non-negative")
      assert.has_error(function() return tide.normal(0, 1) end,
        "normal: with numbers for mean and std, size must be given")
      assert.has_error(function() return tide.normal(I({ 1 }), 1) end,
        "normal: mean must be a floating-point tensor, got int64")
      assert.has_error(function() return tide.randint_like(3, 5) end,
        "randint_like: argument 1 must be a tensor, got number")
    end)

    it("unravel_index", function()
      local r = tide.unravel_index(I({ 1, 5, -1, 6 }), { 2, 3 })
      H.equal(r[1], { 1, 2, 2, 2 }); H.equal(r[2], { 1, 2, 3, 3 })
      r = tide.unravel_index(I({ { 24 } }), { 2, 3, 4 })
      H.equal(r[1], { { 2 } }); H.equal(r[2], { { 3 } }); H.equal(r[3], { { 4 } })
      r = tide.unravel_index(7, 10)
      H.equal(r[1], 7)
      assert.are.equal(0, tide.unravel_index(I({}), { 0 })[1]:numel())
      assert.has_error(function() return tide.unravel_index(I({ 7 }), { 2, 3 }) end,
        "unravel_index: index 7 is out of range for shape [2,3]")
      assert.has_error(function() return tide.unravel_index(I({ 0 }), { 2, 3 }) end,
        "unravel_index: index 0 is out of range for shape [2,3]")
      assert.has_error(function() return tide.unravel_index(T({ 1 }), { 2 }) end,
        "unravel_index: indices must be an integer tensor, got float32")
      assert.has_error(function() return tide.unravel_index(I({ 1 }), { 2, -1 }) end,
        "unravel_index: shape sizes must be a non-negative integer, got -1")
    end)

    it("vander, combinations, narrow_copy", function()
      H.equal(tide.vander(I({ 1, 2, 3 })), { { 1, 1, 1 }, { 4, 2, 1 }, { 9, 3, 1 } })
      H.equal(tide.vander(T({ 2, -1 }), 4, true), { { 1, 2, 4, 8 }, { 1, -1, 1, -1 } })
      assert.are.equal("int64", tide.vander(T({ true }, "bool")):dtype())
      assert.are.equal("2,0", shape(tide.vander(T({ 1, 2 }), 0)))
      H.equal(tide.vander(T({ 3, 4 }), 1), { { 1 }, { 1 } })
      assert.has_error(function() return tide.vander(tide.ones(2, 2)) end, "vander: x must be 1-d, got 2-d")
      local x = T({ 1, 2, 3 })
      each_layout(x, function(v)
        H.equal(tide.combinations(v), { { 1, 2 }, { 1, 3 }, { 2, 3 } })
        H.equal(tide.combinations(v, 2, true), { { 1, 1 }, { 1, 2 }, { 1, 3 }, { 2, 2 }, { 2, 3 }, { 3, 3 } })
      end)
      H.equal(tide.combinations(x, 3), { { 1, 2, 3 } })
      H.equal(tide.combinations(x, 1), { { 1 }, { 2 }, { 3 } })
      assert.are.equal("0,4", shape(tide.combinations(x, 4)))
      assert.are.equal("0", shape(tide.combinations(x, 0)))
      assert.has_error(function() return tide.combinations(x, -1) end,
        "combinations: r must be a non-negative integer, got -1")
      local m = T({ { 1, 2, 3 }, { 4, 5, 6 } })
      local c = tide.narrow_copy(m, 2, 2, 2)
      c:fill_(0)
      H.equal(m:narrow_copy(2, 2, 2), { { 2, 3 }, { 5, 6 } })
      assert.is_true(gradcheck(function(a) return tide.vander(a, 3) end, { rnd({ 3 }, 1) }))
      assert.is_true(gradcheck(function(a) return tide.combinations(a, 2) end, { rnd({ 3 }, 2) }))
    end)
  end)

  describe("floating-point parts", function()
    it("frexp splits into mantissa and exponent", function()
      local v = { 8, 0.3, -5, 1 - 2 ^ -53, 2 ^ -1074, 3 * 2 ^ -1070, 1.7976931348623157e308, -2 ^ 1023, 1e-300 }
      local m, e = tide.frexp(D(v))
      assert.are.equal("int32", e:dtype())
      local mm_, ee = {}, {}
      for i, x in ipairs(v) do mm_[i], ee[i] = math.frexp(x) end
      H.equal(m, mm_); H.equal(e, ee)
      m, e = tide.frexp(D({ 0, -0.0, inf, -inf, nan }))
      H.equal(m, { 0, 0, inf, -inf, nan }); H.equal(e, { 0, 0, 0, 0, 0 })
      H.equal(m:reciprocal():narrow(1, 1, 2), { inf, -inf })   -- -0.0 kept
      each_layout(T({ { 1, 6 }, { 0.75, -3 } }), function(x)
        local m2, e2 = x:frexp()
        assert.are.equal("float32", m2:dtype())
        H.equal(m2, { { 0.5, 0.75 }, { 0.75, -0.75 } }); H.equal(e2, { { 1, 3 }, { 0, 2 } })
      end)
      assert.has_error(function() return tide.frexp(I({ 1 })) end,
        "frexp: input must be a floating-point tensor, got int64")
      assert.is_true(gradcheck(function(a) return (tide.frexp(a)) end, { rnd({ 2, 3 }, 1) }))
    end)

    it("ldexp", function()
      H.equal(tide.ldexp(T({ 1, 1, 3 }), I({ 3, -1, 0 })), { 8, 0.5, 3 })
      H.equal(tide.ldexp(D({ 1 }), I({ 1023 })), { 2 ^ 1023 })
      assert.are.equal("float32", tide.ldexp(I({ 1 }), I({ 1 })):dtype())
      H.equal(D({ 3 }):ldexp(-2), { 0.75 })
      local x = T({ 1, 2 })
      x:ldexp_(T({ 2, 2 }))
      H.equal(x, { 4, 8 })
      assert.has_error(function() return tide.ldexp(T({ 1 }), "a") end,
        "ldexp: argument 2 must be a tensor or a number, got string")
      assert.is_true(gradcheck(function(a) return tide.ldexp(a, I({ 1, -2, 0 })) end, { rnd({ 2, 3 }, 2) }))
    end)
  end)

  describe("integers", function()
    it("gcd and lcm", function()
      local a, b = I({ 12, -18, 0, 7, 0, 48, 1071 }), I({ 8, 12, 0, 0, -5, 18, 462 })
      each_layout(a, function(v)
        H.equal(tide.gcd(v, b), { 4, 6, 0, 7, 5, 6, 21 })
        H.equal(v:lcm(b), { 24, 36, 0, 0, 0, 144, 23562 })
      end)
      H.equal(tide.gcd(I({ { 6 }, { 9 } }), I({ 4, 3 })), { { 2, 3 }, { 1, 3 } })
      H.equal(tide.gcd(T({ 10 }, "int32"), 4), { 2 })
      assert.are.equal("int32", tide.gcd(T({ 10 }, "int32"), 4):dtype())
      assert.are.equal("int64", tide.lcm(T({ 10 }, "uint8"), I({ 4 })):dtype())
      H.equal(tide.gcd(I(0), I(0)), 0)
      local x = I({ 4, 9 })
      x:gcd_(I({ 6, 6 }))
      H.equal(x, { 2, 3 })
      assert.has_error(function() return tide.gcd(T({ 1 }), I({ 1 })) end,
        "gcd: argument 1 must be an integer tensor, got float32")
      assert.has_error(function() return tide.lcm(I({ 1 }), 1.5) end,
        "lcm: argument 2 must be a tensor or an integer, got 1.5")
      assert.has_error(function() return tide.gcd(T({ true }), I({ 1 })) end,
        "gcd: argument 1 must be an integer tensor, got bool")
    end)

    it("bitwise and, or, xor, not: two's complement", function()
      -- a plain-Lua reference on the bits of non-negative values below 2^31
      local function ref(x, y, f)
        local r, p = 0, 1
        for _ = 1, 31 do
          local bx, by = x % 2, y % 2
          r = r + f(bx, by) * p
          x, y, p = (x - bx) / 2, (y - by) / 2, p * 2
        end
        return r
      end
      local xs, ys = { 12, 0, 2147483647, 65535, 5 }, { 10, 7, 1234567, 4096, 5 }
      local band, bor, bxor = {}, {}, {}
      for i = 1, #xs do
        band[i] = ref(xs[i], ys[i], function(p, q) return p * q end)
        bor[i] = ref(xs[i], ys[i], function(p, q) return math.max(p, q) end)
        bxor[i] = ref(xs[i], ys[i], function(p, q) return (p + q) % 2 end)
      end
      for _, dt in ipairs { "int32", "int64" } do
        each_layout(T(xs, dt), function(v)
          H.equal(tide.bitwise_and(v, T(ys, dt)), band, dt)
          H.equal(v:bitwise_or(T(ys, dt)), bor, dt)
          H.equal(tide.bitwise_xor(v, T(ys, dt)), bxor, dt)
        end)
      end
      -- negative values, as two's complement
      H.equal(tide.bitwise_and(I({ -1, -8, -6 }), I({ 5, 7, -3 })), { 5, 0, -8 })
      H.equal(tide.bitwise_or(T({ 12, -1, -8 }, "int32"), 3), { 15, -1, -5 })
      H.equal(tide.bitwise_xor(I({ -1, -2 }), I({ 0, 1 })), { -1, -1 })
      -- int64's extremes, exactly
      local big = tide.full({ 1 }, 2 ^ 62, "int64") + 3
      local lowest = tide.full({ 1 }, -2 ^ 63, "int64")
      assert.is_true(tide.bitwise_and(big, I({ 7 })):eq(3):all():item())
      assert.is_true(tide.bitwise_xor(big, big):eq(0):all():item())
      assert.is_true(tide.bitwise_and(lowest, I({ -1 })):eq(lowest):all():item())
      assert.is_true(tide.bitwise_or(lowest, big):eq(lowest + big):all():item())
      assert.is_true(tide.bitwise_not(lowest):eq(lowest - 1):all():item())   -- 2^63 - 1
      H.equal(tide.bitwise_xor(T({ 12, 255 }, "uint8"), T({ 10, 15 }, "uint8")), { 6, 240 })
      H.equal(tide.bitwise_not(T({ 0, 200 }, "uint8")), { 255, 55 })
      H.equal(tide.bitwise_not(I({ 0, -1, 5 })), { -1, 0, -6 })
      H.equal(tide.bitwise_and(T({ true, true, false }), T({ true, false, false })), { true, false, false })
      H.equal(tide.bitwise_xor(T({ true, false }), true), { false, true })
      assert.are.equal("bool", tide.bitwise_or(T({ true }), T({ false })):dtype())
      H.equal(tide.bitwise_and(T({ true, false }), I({ 3, 3 })), { 1, 0 })
      H.equal(tide.bitwise_and(I({ 6 }), I({ { 3 }, { 12 } })), { { 2 }, { 4 } })
      assert.are.equal("0", shape(tide.bitwise_or(I({}), 1)))
      H.equal(tide.bitwise_and(I(6), 3), 2)
      local x = I({ 6, 5 })
      x:bitwise_xor_(3)
      H.equal(x, { 5, 6 })
      x:bitwise_not_()
      H.equal(x, { -6, -7 })
      assert.has_error(function() return tide.bitwise_and(I({ 1 }), T({ 1 })) end,
        "bitwise_and: argument 2 must be an integer or bool tensor, got float32")
      assert.has_error(function() return tide.bitwise_or(I({ 1 }), 1.5) end,
        "bitwise_or: argument 2 must be a tensor or an integer, got 1.5")
      assert.has_error(function() return tide.bitwise_not(T({ 1 })) end,
        "bitwise_not: input must be an integer or bool tensor, got float32")
      assert.has_error(function() return I({ 1 }):bitwise_and_(I({ 1, 2 })) end,
        "bitwise_and_: the result's shape [2] does not match the tensor's shape [1]")
    end)
  end)

  describe("matrix_exp", function()
    -- a plain-Lua reference: the Taylor series of e^(A / 2^s), squared s times
    local function ref_exp(A)
      local n = #A
      local s = 8
      local X, term, R = {}, {}, {}
      for i = 1, n do
        X[i], term[i], R[i] = {}, {}, {}
        for j = 1, n do
          X[i][j] = A[i][j] / 2 ^ s
          term[i][j] = i == j and 1 or 0
          R[i][j] = term[i][j]
        end
      end
      for k = 1, 30 do
        term = mm(term, X)
        for i = 1, n do for j = 1, n do term[i][j] = term[i][j] / k; R[i][j] = R[i][j] + term[i][j] end end
      end
      for _ = 1, s do R = mm(R, R) end
      return R
    end

    it("matches the series, for small and large norms, in batches", function()
      local A = H.nest(H.values(9, -1, 1, 3), { 3, 3 })
      local big = map2(A, A, function(x) return 20 * x end)
      H.close(tide.matrix_exp(D(A)), ref_exp(A), 1e-12, 1e-13)
      H.close(tide.matrix_exp(D({ A, big })), { ref_exp(A), ref_exp(big) }, 1e-9, 1e-9)
      each_layout(D(A), function(v) H.close(v:matrix_exp(), ref_exp(A), 1e-12, 1e-13) end)
      H.close(tide.linalg.matrix_exp(T(A)), ref_exp(A), 1e-5, 1e-6)
      local rot = tide.matrix_exp(D({ { 0, 1 }, { -1, 0 } }) * (math.pi / 2))
      H.close(rot, { { 0, 1 }, { -1, 0 } }, 0, 1e-15)
      H.close(tide.matrix_exp(D({ { { 2 } } })), { { { math.exp(2) } } }, 1e-15)
      H.equal(tide.matrix_exp(tide.zeros(3, 3)), { { 1, 0, 0 }, { 0, 1, 0 }, { 0, 0, 1 } })
      assert.are.equal("0,2,2", shape(tide.matrix_exp(tide.zeros(0, 2, 2))))
      assert.are.equal("float16", tide.matrix_exp(tide.zeros(2, 2, "float16")):dtype())
      assert.has_error(function() return tide.matrix_exp(tide.ones(2, 3)) end,
        "matrix_exp: expected a square matrix or a batch of them, got shape [2,3]")
      assert.has_error(function() return tide.matrix_exp(I({ { 1 } })) end,
        "matrix_exp: input must be a floating-point tensor, got int64")
      assert.is_true(gradcheck(tide.matrix_exp, { rnd({ 3, 3 }, 4) }))
      assert.is_true(gradcheck(function(a) return tide.matrix_exp(a * 5) end, { rnd({ 2, 2 }, 5) }))
    end)
  end)
end)
