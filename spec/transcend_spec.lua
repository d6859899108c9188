-- transcend_spec: the transcendental elementwise ops (exp, log, log1p, expm1,
-- sqrt, rsqrt, sin, cos, tanh, sigmoid, gelu, silu, reciprocal; tan, asin,
-- acos, atan, sinh, cosh, asinh, acosh, atanh, erf, erfc, erfinv, log2,
-- log10, exp2) against a
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

local SQRTPI = math.sqrt(math.pi)

-- erf(a) for 0 <= a < 1.5 by its Taylor series, with full relative accuracy near 0
local function erf_series(a)
  local sum, term, k = a, a, 0
  repeat
    k = k + 1
    term = -term * a * a / k
    local add = term / (2 * k + 1)
    sum = sum + add
  until math.abs(add) <= 1e-17 * math.abs(sum)   -- <=: a = 0 ends at once
  return 2 / SQRTPI * sum
end

-- erfc(a) for a >= 0: 1 - the series below 1.5, a continued fraction above
local function erfc_pos(a)
  if a < 1.5 then return 1 - erf_series(a) end
  if a == inf then return 0 end
  -- erfc(a) = exp(-a^2)/sqrt(pi) * 1/(a + (1/2)/(a + 1/(a + (3/2)/(a + ...))))
  local f = a
  for k = 400, 1, -1 do f = a + (k / 2) / f end
  return math.exp(-a * a) / SQRTPI / f
end

local function erf(x)
  if x ~= x then return x end
  local a = math.abs(x)
  local r = a < 1.5 and erf_series(a) or 1 - erfc_pos(a)
  if x < 0 or 1 / x < 0 then return -r end
  return r
end
local function erfc(x)
  if x ~= x then return x end
  if x < 0 then return 2 - erfc_pos(-x) end
  return erfc_pos(x)
end
-- erfinv by bisection: on erf below 0.5, on erfc (relative accuracy in the tail) above
local function erfinv(y)
  if y ~= y or y > 1 or y < -1 then return nan end
  if y == 1 then return inf end
  if y == -1 then return -inf end
  if y == 0 then return y end
  local a, lo, hi = math.abs(y), 0, 6
  for _ = 1, 200 do
    local mid = 0.5 * (lo + hi)
    if mid == lo or mid == hi then break end
    local low = a <= 0.5 and erf_series(mid) < a or a > 0.5 and erfc_pos(mid) > 1 - a
    if low then lo = mid else hi = mid end
  end
  local x = 0.5 * (lo + hi)
  return y < 0 and -x or x
end
local LN2 = math.log(2)
local function asinh(x)
  local a = math.abs(x)
  local r
  if a > 1e8 then r = math.log(a) + LN2 else r = log1p(a + a * a / (1 + math.sqrt(1 + a * a))) end
  if x < 0 or 1 / x < 0 then return -r end
  return r
end
local function acosh(x)
  if x ~= x or x < 1 then return nan end
  if x > 1e8 then return math.log(x) + LN2 end
  local t = x - 1
  return log1p(t + math.sqrt(2 * t + t * t))
end
local function atanh(x)
  if x ~= x or x > 1 or x < -1 then return nan end
  if x == 1 then return inf end
  if x == -1 then return -inf end
  if x == 0 then return x end
  return 0.5 * log1p(2 * x / (1 - x))
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
  tan = function(x) if x == inf or x == -inf then return nan end return math.tan(x) end,
  asin = function(x) if x > 1 or x < -1 then return nan end return math.asin(x) end,
  acos = function(x) if x > 1 or x < -1 then return nan end return math.acos(x) end,
  atan = math.atan, sinh = math.sinh, cosh = math.cosh,
  asinh = asinh, acosh = acosh, atanh = atanh, erf = erf, erfc = erfc, erfinv = erfinv,
  log2 = function(x)
    if x == inf then return inf end
    local m, e = math.frexp(x)   -- exact for powers of two
    if x > 0 and m == 0.5 then return e - 1 end
    return math.log(x) / LN2
  end,
  log10 = math.log10,
  exp2 = function(x) return 2 ^ x end,
}
local OPS = { "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "silu",
              "gelu", "gelu_tanh", "reciprocal", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh",
              "acosh", "atanh", "erf", "erfc", "erfinv", "log2", "log10", "exp2" }

-- float32 tolerance in units of 2^-23 relative (measured worst cases are lower:
-- see transcend.c); float64 results come from libm. The libm-backed ops allow
-- the CUDA math library's documented bounds too (the suite runs on cuda:0).
local ULPS = { gelu = 6, gelu_tanh = 4, sigmoid = 3, silu = 4, tan = 4, sinh = 3, cosh = 3, asinh = 3,
               acosh = 4, atanh = 3, erfc = 5, exp2 = 2, log10 = 2, erfinv = 2 }
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

  it("tan, the inverse and hyperbolic functions, erf and the bases 2 and 10 match hand-computed values", function()
    local d = "float64"
    H.close(tide.tensor({ 0, math.pi / 4, -1 }, d):tan(), { 0, 1, -1.5574077246549023 }, 1e-15)
    H.close(tide.tensor({ 0, 0.5, -1 }, d):asin(), { 0, math.pi / 6, -math.pi / 2 }, 1e-15)
    H.close(tide.tensor({ 1, 0.5, -1 }, d):acos(), { 0, math.pi / 3, math.pi }, 1e-15)
    H.close(tide.tensor({ 0, 1, -inf }, d):atan(), { 0, math.pi / 4, -math.pi / 2 }, 1e-15)
    H.close(tide.tensor({ 0, 1, -2 }, d):sinh(), { 0, 1.1752011936438014, -3.626860407847019 }, 1e-15)
    H.close(tide.tensor({ 0, 1, -2 }, d):cosh(), { 1, 1.5430806348152437, 3.7621956910836314 }, 1e-15)
    H.close(tide.tensor({ 0, 1, -2 }, d):asinh(), { 0, 0.881373587019543, -1.4436354751788103 }, 1e-15)
    H.close(tide.tensor({ 1, 2, 10 }, d):acosh(), { 0, 1.3169578969248166, 2.993222846126381 }, 1e-15)
    H.close(tide.tensor({ 0, 0.5, -0.9 }, d):atanh(), { 0, 0.5493061443340549, -1.4722194895832204 }, 1e-15)
    H.close(tide.tensor({ 0, 0.5, -1, 3 }, d):erf(),
      { 0, 0.5204998778130465, -0.8427007929497149, 0.9999779095030014 }, 1e-15)
    H.close(tide.tensor({ 0, 0.5, -1, 5 }, d):erfc(),
      { 1, 0.4795001221869535, 1.8427007929497148, 1.5374597944280349e-12 }, 1e-14)
    H.close(tide.tensor({ 0, 0.5, -0.9, 0.999, 1 - 1e-12, 1 - 2 ^ -53, 1e-10 }, d):erfinv(),
      { 0, 0.4769362762044699, -1.1630871536766743, 2.326753765513525, 5.042031898572696,
        5.8635847487551676, 8.862269254527581e-11 }, 1e-14)
    H.equal(tide.tensor({ 1, 8, 0.25, 1024 }, d):log2(), { 0, 3, -2, 10 })
    H.close(tide.tensor({ 1, 1000, 0.01, 2 }, d):log10(), { 0, 3, -2, 0.3010299956639812 }, 1e-15)
    H.equal(tide.tensor({ 0, 3, -2, 10 }, d):exp2(), { 1, 8, 0.25, 1024 })
    -- float32 through the same functions
    H.close(tide.tensor({ 0.5, -0.9 }):erfinv(), { 0.4769362762044699, -1.1630871536766743 }, 2 * F32_EPS)
    H.equal(tide.tensor({ 8, 0.25 }):log2(), { 3, -2 })
  end)

  it("tan, the inverse and hyperbolic functions and erf get the special values right", function()
    local function f(op, x, dtype) return apply(op, tide.tensor({ x }, dtype)):totable()[1] end
    for _, dt in ipairs { "float32", "float64" } do
      for _, c in ipairs { { "asin", 1.5 }, { "acos", -1.5 }, { "acosh", 0.5 }, { "atanh", 1.5 }, { "erfinv", 1.5 },
                           { "erfinv", -1.01 }, { "tan", inf }, { "log2", -1 }, { "log10", -1 } } do
        local y = f(c[1], c[2], dt)
        assert.is_true(y ~= y, c[1] .. "(" .. c[2] .. ") must be nan (" .. dt .. ")")
      end
      assert.are.equal(inf, f("erfinv", 1, dt))
      assert.are.equal(-inf, f("erfinv", -1, dt))
      assert.are.equal(inf, f("atanh", 1, dt))
      assert.are.equal(-inf, f("atanh", -1, dt))
      assert.are.equal(1, f("erf", inf, dt))
      assert.are.equal(-1, f("erf", -inf, dt))
      assert.are.equal(2, f("erfc", -inf, dt))
      assert.are.equal(0, f("erfc", inf, dt))
      assert.are.equal(inf, f("cosh", -inf, dt))
      assert.are.equal(-inf, f("sinh", -inf, dt))
      assert.are.equal(inf, f("sinh", 1000, dt))
      assert.are.equal(-inf, f("asinh", -inf, dt))
      assert.are.equal(0, f("acosh", 1, dt))
      assert.are.equal(-inf, f("log2", 0, dt))
      assert.are.equal(-inf, f("log10", 0, dt))
      assert.are.equal(0, f("exp2", -inf, dt))
      assert.are.equal(inf, f("exp2", 1e4, dt))
      for _, op in ipairs { "tan", "asin", "atan", "sinh", "asinh", "atanh", "erf", "erfinv" } do
        assert.are.equal(-inf, 1 / f(op, -0.0, dt), op .. "(-0) must be -0 (" .. dt .. ")")
      end
    end
  end)

  it("trunc rounds toward zero and keeps integer tensors as they are", function()
    H.equal(tide.tensor({ 2.7, -2.7, 0.5, -0.5, 3, 2 ^ 40 + 0.5, -inf }, "float64"):trunc(),
      { 2, -2, 0, -0.0, 3, 2 ^ 40, -inf })
    H.equal(tide.tensor({ 2.7, -2.7, 1e20 }):trunc(), { 2, -2, tide.tensor({ 1e20 }):item() })
    assert.are.equal(-inf, 1 / tide.tensor({ -0.5 }, "float64"):trunc():item())
    local y = tide.tensor({ nan }):trunc():item()
    assert.is_true(y ~= y)
    for _, dt in ipairs { "int64", "int32", "uint8" } do
      local t = tide.tensor({ 0, 7, 200 }, dt)
      assert.are.equal(dt, t:trunc():dtype())
      H.equal(t:trunc(), { 0, 7, 200 })
    end
    local t = tide.tensor({ { 1.5, -1.5 }, { 2.5, -3.75 } }):t()
    t:trunc_()
    H.equal(t, { { 1, 2 }, { -1, -3 } })
    local g = tide.tensor({ 1.5, -2.5 }, "float64"):requires_grad_()
    g:trunc():sum():backward()
    H.equal(g.grad, { 0, 0 })   -- piecewise constant, as floor (the gradchecks are autograd_spec's)
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
