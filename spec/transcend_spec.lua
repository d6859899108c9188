-- transcend_spec: the transcendental elementwise ops (exp, log, log1p, expm1,
-- sqrt, rsqrt, sin, cos, tanh, sigmoid, gelu, silu, reciprocal) against a
-- float64 reference computed here in plain Lua, over a sweep of values with
-- the special ones (zeros, denormals, huge, inf, NaN), in every layout,
-- 0-d, empty, integer inputs and the in-place forms.
local tide = require "tide"
local H = require "spec.helpers"

local inf, nan = math.huge, 0 / 0

-- -- float64 references -----------------------------------------------------------------------

local function log1p(x)   -- Goldberg: exact-ish wherever 1 + x rounds
  local u = 1 + x
  if u == 1 then return x end
  if u == inf or u ~= u or u <= 0 then return math.log(u) end
  return math.log(u) * x / (u - 1)
end

local function expm1(x)   -- Kahan
  if x ~= x then return x end
  if x == inf then return inf end
  local u = math.exp(x)
  if u == 1 then return x end
  if u == inf then return inf end
  if u - 1 == -1 then return -1 end
  return (u - 1) * x / math.log(u)
end

-- erfc(a) for a >= 0: Taylor series of erf below 1.5, continued fraction above
local SQRTPI = math.sqrt(math.pi)
local function erfc_pos(a)
  if a < 1.5 then
    local sum, term, k = a, a, 0
    repeat
      k = k + 1
      term = -term * a * a / k
      local add = term / (2 * k + 1)
      sum = sum + add
    until math.abs(add) <= 1e-17 * math.abs(sum)   -- <=: a = 0 ends at once
    return 1 - 2 / SQRTPI * sum
  end
  if a == inf then return 0 end
  -- erfc(a) = exp(-a^2)/sqrt(pi) * 1/(a + (1/2)/(a + 1/(a + (3/2)/(a + ...))))
  local f = a
  for k = 400, 1, -1 do f = a + (k / 2) / f end
  return math.exp(-a * a) / SQRTPI / f
end

local function phi(x)   -- standard normal CDF
  if x ~= x then return x end
  local a = math.abs(x) / math.sqrt(2)
  if x < 0 then return 0.5 * erfc_pos(a) end
  return 1 - 0.5 * erfc_pos(a)
end

local function sigmoid(x)
  if x >= 0 then return 1 / (1 + math.exp(-x)) end
  local e = math.exp(x)
  return e / (1 + e)
end

local function mul_limit(x, f)   -- x * f(x), with the limit 0 at -inf
  if x == -inf then return 0 end
  return x * f
end

local REF = {
  exp = math.exp, log = math.log, log1p = log1p, expm1 = expm1, sqrt = math.sqrt,
  rsqrt = function(x) return 1 / math.sqrt(x) end,
  sin = function(x) if x == inf or x == -inf then return nan end return math.sin(x) end,
  cos = function(x) if x == inf or x == -inf then return nan end return math.cos(x) end,
  tanh = math.tanh, sigmoid = sigmoid,
  silu = function(x) return mul_limit(x, sigmoid(x)) end,
  gelu = function(x) return mul_limit(x, phi(x)) end,
  gelu_tanh = function(x)
    if x == inf then return inf end
    return mul_limit(x, sigmoid(2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)))
  end,
  reciprocal = function(x) return 1 / x end,
}
local OPS = { "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "silu",
              "gelu", "gelu_tanh", "reciprocal" }

-- float32 tolerance in units of 2^-23 relative (measured worst cases are lower:
-- see transcend.c); float64 results come from libm.
local ULPS = { gelu = 6, gelu_tanh = 4, sigmoid = 3, silu = 4 }
local F32_EPS, F32_TINY = 2 ^ -23, 2 ^ -149

local function apply(op, t)
  if op == "gelu_tanh" then return t:gelu("tanh") end
  return t[op](t)
end
local function apply_(op, t)
  if op == "gelu_tanh" then return t:gelu_("tanh") end
  return t[op .. "_"](t)
end

-- -- the sweep ----------------------------------------------------------------------------

local SPECIAL = { 0, -0.0, 1e-30, -1e-30, 1e-40, -1e-40, 1e-7, -1e-7, 0.5, -0.5, 1, -1, 2, -2,
                  math.pi / 2, 3, -3, 10, -10, 20, -20, 50, -50, 88, -88, 89, 100, -100,
                  1e5, -1e5, 1e10, -1e10, 3e38, -3e38, inf, -inf, nan }

local function sweep()
  local v = {}
  for _, x in ipairs(SPECIAL) do v[#v + 1] = x end
  for _, x in ipairs(H.values(120, -12, 12, 7)) do v[#v + 1] = x end
  for _, x in ipairs(H.values(40, -1, 1, 11)) do v[#v + 1] = x end
  for e = -38, 38, 2 do v[#v + 1] = 1.2345 * 10 ^ e end
  while #v % 8 ~= 0 do v[#v + 1] = 0.25 * #v end
  return v
end
local VALUES = sweep()
local ROWS = #VALUES / 8

-- The inputs as stored (float32-rounded), flat.
local function stored(t) return H.flat(t:totable()) end

local function expect(op, xs, dtype, shape)
  local ref = {}
  for i, x in ipairs(xs) do ref[i] = REF[op](x) end
  -- rounding the reference to the result dtype turns overflow into inf
  return tide.tensor(H.nest(ref, shape), dtype)
end

local function check(op, got, xs, dtype, shape, msg)
  local e = expect(op, xs, dtype, shape)
  if dtype == "float32" then
    H.close(got, e, (ULPS[op] or 2) * F32_EPS, 4 * F32_TINY, msg)
  else
    local rtol = (op == "gelu" or op == "gelu_tanh") and 1e-13 or 1e-14
    H.close(got, e, rtol, 1e-300, msg)
  end
end

describe("transcendental ops", function()
  it("match hand-computed values", function()
    local x = tide.tensor({ 0, 1, 4 })
    H.close(x:exp(), { 1, 2.718281828459045, 54.598150033144236 }, 3e-7)
    H.close(tide.tensor({ 1, 2.718281828459045, 0.25 }):log(), { 0, 1, -1.3862943611198906 }, 3e-7)
    H.close(x:log1p(), { 0, 0.6931471805599453, 1.6094379124341003 }, 3e-7)
    H.close(x:expm1(), { 0, 1.718281828459045, 53.598150033144236 }, 3e-7)
    H.equal(x:sqrt(), { 0, 1, 2 })
    H.equal(x:rsqrt(), { inf, 1, 0.5 })
    H.equal(x:reciprocal(), { inf, 1, 0.25 })
    H.close(tide.tensor({ 0, math.pi / 2, math.pi }):sin(), { 0, 1, 0 }, 3e-7, 1e-7)
    H.close(tide.tensor({ 0, math.pi / 2, math.pi }):cos(), { 1, 0, -1 }, 3e-7, 1e-7)
    H.close(x:tanh(), { 0, 0.7615941559557649, 0.999329299739067 }, 3e-7)
    H.close(x:sigmoid(), { 0.5, 0.7310585786300049, 0.9820137900379085 }, 3e-7)
    H.close(x:silu(), { 0, 0.7310585786300049, 3.928055160151634 }, 3e-7)
    H.close(tide.tensor({ -1, 0, 1 }):gelu(), { -0.15865525393145707, 0, 0.8413447460685429 }, 4e-7)
    H.close(tide.tensor({ -1, 0, 1 }):gelu("tanh"), { -0.15880800939172324, 0, 0.8411919906082768 }, 4e-7)
    H.close(tide.gelu(tide.tensor({ 1 }), "none"), { 0.8413447460685429 }, 4e-7)
  end)

  it("get the special values right", function()
    local function f(op, x, dtype) return apply(op, tide.tensor({ x }, dtype)):totable()[1] end
    for _, dt in ipairs { "float32", "float64" } do
      assert.are.equal(0, f("exp", -inf, dt))
      assert.are.equal(inf, f("exp", inf, dt))
      assert.are.equal(inf, f("exp", 1000, dt))
      assert.are.equal(-inf, f("log", 0, dt))
      assert.are.equal(-inf, f("log", -0.0, dt))
      assert.is_true(f("log", -1, dt) ~= f("log", -1, dt))
      assert.are.equal(inf, f("log", inf, dt))
      assert.are.equal(-inf, f("log1p", -1, dt))
      assert.are.equal(-1, f("expm1", -inf, dt))
      assert.are.equal(1, f("tanh", inf, dt))
      assert.are.equal(-1, f("tanh", -inf, dt))
      assert.are.equal(0, f("sigmoid", -inf, dt))
      assert.are.equal(1, f("sigmoid", inf, dt))
      assert.are.equal(0, f("silu", -inf, dt))
      assert.are.equal(0, f("gelu", -inf, dt))
      assert.are.equal(inf, f("gelu", inf, dt))
      assert.are.equal(-inf, f("rsqrt", -0.0, dt))
      assert.are.equal(-inf, f("reciprocal", -0.0, dt))
      assert.is_true(f("sin", inf, dt) ~= f("sin", inf, dt))
      for _, op in ipairs(OPS) do
        local y = f(op, nan, dt)
        assert.is_true(y ~= y, op .. "(nan) must be nan")
      end
      -- odd functions keep the sign of zero
      for _, op in ipairs { "log1p", "expm1", "sqrt", "sin", "tanh", "silu", "gelu", "gelu_tanh" } do
        assert.are.equal(-inf, 1 / f(op, -0.0, dt), op .. "(-0) must be -0 (" .. dt .. ")")
      end
    end
    -- denormal results and inputs
    H.close(tide.tensor({ -100 }):exp(), { math.exp(-100) }, 1e-5, 2 ^ -149)
    H.close(tide.tensor({ 1e-40 }):log(), { math.log(1e-40) }, 3e-7)
  end)

  for _, op in ipairs(OPS) do
    for _, dtype in ipairs { "float32", "float64" } do
      it(op .. " matches the float64 reference in every layout (" .. dtype .. ")", function()
        local shape = { ROWS, 8 }
        local base = tide.tensor(H.nest(VALUES, shape), dtype)
        local xs = stored(base)
        for name, t in pairs(H.layouts(base)) do
          local y = apply(op, t)
          assert.are.equal(dtype, y:dtype())
          assert.is_true(y:is_contiguous())
          check(op, y, xs, dtype, shape, op .. " " .. name)
        end
      end)
    end
  end

  it("broadcast (stride-0) inputs", function()
    local v = tide.tensor({ 0.5, -2, 3 })
    local e = v:expand(4, 3)
    local xs = stored(e)
    for _, op in ipairs(OPS) do check(op, apply(op, e), xs, "float32", { 4, 3 }, op) end
  end)

  it("handle 0-d and empty tensors", function()
    for _, op in ipairs(OPS) do
      local s = apply(op, tide.tensor(0.75))
      assert.are.same({}, s:shape())
      local r = tide.tensor({ REF[op](0.75) }):totable()[1]
      H.close(s, r, 6 * F32_EPS, 0, op)
      local z = apply(op, tide.zeros(0, 3))
      assert.are.same({ 0, 3 }, z:shape())
      assert.are.equal("float32", z:dtype())
    end
  end)

  it("promote integer and bool inputs to float32; keep half types", function()
    for _, dt in ipairs { "int64", "int32", "uint8", "bool" } do
      local vals = dt == "bool" and { true, false } or { 1, 2 }
      local t = tide.tensor(vals, dt)
      local xs = dt == "bool" and { 1, 0 } or { 1, 2 }
      for _, op in ipairs(OPS) do
        local y = apply(op, t)
        assert.are.equal("float32", y:dtype(), op .. " of " .. dt)
        check(op, y, xs, "float32", { 2 }, op .. " of " .. dt)
      end
    end
    local h = tide.tensor({ 1, 2 }, "float16")
    assert.are.equal("float16", h:exp():dtype())
    H.close(h:exp(), { math.exp(1), math.exp(2) }, 1e-3)
    H.close(tide.tensor({ 1, 2 }, "bfloat16"):tanh(), { math.tanh(1), math.tanh(2) }, 1e-2)
  end)

  it("work in place, on contiguous tensors and on strided views", function()
    for _, op in ipairs(OPS) do
      local vals = H.values(24, -5, 5, 3)
      local t = tide.tensor(H.nest(vals, { 4, 6 }))
      local xs = stored(t)
      local r = apply_(op, t)
      assert.are.equal(t, r)
      check(op, t, xs, "float32", { 4, 6 }, op .. "_")

      -- every other column of a wider tensor; the columns in between stay 0
      local wide = tide.zeros(4, 12)
      local view = wide:as_strided({ 4, 6 }, { 12, 2 }, 0)
      view:copy_(tide.tensor(H.nest(vals, { 4, 6 })))
      apply_(op, view)
      check(op, view, xs, "float32", { 4, 6 }, op .. "_ strided")
      H.equal(wide:as_strided({ 4, 6 }, { 12, 2 }, 1), tide.zeros(4, 6))

      -- a transposed float64 view
      local d = tide.tensor(H.nest(vals, { 4, 6 }), "float64"):t()
      local dx = stored(d)
      apply_(op, d)
      check(op, d, dx, "float64", { 6, 4 }, op .. "_ transposed")
    end
  end)

  it("reject a bad gelu approximation", function()
    assert.has_error(function() tide.tensor({ 1 }):gelu("fast") end,
      "gelu: approximate must be 'none' or 'tanh', got fast")
  end)

  it("take sin and cos of large arguments (libm fallback)", function()
    local xs = { 1e6, 3e6, -7.5e7, 1e20, 12345.678 }
    local t = tide.tensor(xs)
    local s = stored(t)
    check("sin", t:sin(), s, "float32", { 5 }, "sin")
    check("cos", t:cos(), s, "float32", { 5 }, "cos")
  end)

  it("agree between the vector body and the tail on long inputs", function()
    local n = 5000
    local vals = H.values(n, -30, 30, 99)
    local t = tide.tensor(vals)
    local xs = stored(t)
    for _, op in ipairs(OPS) do check(op, apply(op, t), xs, "float32", { n }, op) end
  end)
end)
