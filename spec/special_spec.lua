-- special_spec: the gamma family (lgamma, digamma, polygamma) against float64
-- values from identities and series written here: factorials, Gauss's digamma
-- theorem at rationals, zeta values, the recurrence and reflection formulas,
-- asymptotic series for large x; PyTorch's values at the poles; float32 as
-- the float64 result rounded once; layouts, in-place forms and errors. The
-- Bessel functions i0, i0e, i1, i1e against their series, and tide.special.
local tide = require "tide"
local H = require "spec.helpers"

local inf, nan = math.huge, 0 / 0
local PI, LN2, LN3, SQRT3 = math.pi, math.log(2), math.log(3), math.sqrt(3)
local EULER = 0.57721566490153286061
local ZETA3 = 1.20205690315959428540     -- Apery's constant
local CATALAN = 0.91596559417721901505
local ULP = 2 ^ -52

-- A reference that sums terms: { the sum, the sum of their magnitudes }, which
-- bounds the reference's own rounding where the terms cancel.
local function sum(...)
  local s, m = 0, 0
  for _, t in ipairs { ... } do s, m = s + t, m + math.abs(t) end
  return { s, m }
end

-- Asserts that op(xs) in float64 is within `ulps` of each expected value (2^-52
-- of |e|, or of the magnitude of e's terms where sum() made it) and that inf,
-- -inf, 0 and NaN are matched exactly.
local function within(got, xs, want, ulps, what)
  local g = got:double():totable()
  for i, e in ipairs(want) do
    local a, mag = g[i], nil
    if type(e) == "table" then e, mag = e[1], e[2] end
    mag = math.max(math.abs(e), mag or 0)
    local ok
    if e ~= e then ok = a ~= a
    elseif e == inf or e == -inf or e == 0 then ok = a == e
    else ok = math.abs(a - e) <= ulps * ULP * mag end
    if not ok then
      error(("%s at x = %.17g: got %.17g, expected %.17g (%.1f ulp)"):format(what, xs[i], a, e,
        math.abs(a - e) / (ULP * mag)), 2)
    end
  end
end

local function check(xs, want, f, ulps, what)
  within(f(tide.tensor(xs, "float64")), xs, want, ulps, what)
end

local function fact(n)
  local f = 1
  for k = 2, n do f = f * k end
  return f
end

-- zeta(s) for s >= 4: the sum to 1000 from the small end, and the tail's integral from 1000.5
local function zeta(s)
  local sum = (1000.5) ^ (1 - s) / (s - 1)
  for k = 1000, 1, -1 do sum = sum + k ^ -s end
  return sum
end

describe("lgamma", function()
  it("is log((n-1)!) at the integers and log(sqrt(pi) (1/2)(3/2)...(n-1/2)) at the half-integers", function()
    local xs, want = {}, {}
    for n = 1, 25 do xs[#xs + 1], want[#want + 1] = n, math.log(fact(n - 1)) end
    local p = 1
    for n = 0, 15 do
      if n > 0 then p = p * (n - 0.5) end
      xs[#xs + 1], want[#want + 1] = n + 0.5, 0.5 * math.log(PI) + math.log(p)
      -- Gamma(1/2 - n) = (-1)^n sqrt(pi) / ((1/2)(3/2)...(n-1/2)); the two logs cancel near
      -- lgamma's negative zeros (-2.5 is one of its smaller values), and so does CUDA's reflection
      if n > 0 then xs[#xs + 1], want[#want + 1] = 0.5 - n, sum(0.5 * math.log(PI), -math.log(p)) end
    end
    check(xs, want, tide.lgamma, 6, "lgamma")
  end)

  it("follows Stirling's series for large x and -log x near 0", function()
    local xs, want = { 1e3, 12345.5, 1e6, 1e15, 1e300 }, {}
    for i, x in ipairs(xs) do
      want[i] = (x - 0.5) * math.log(x) - x + 0.5 * math.log(2 * PI) + 1 / (12 * x) - 1 / (360 * x ^ 3)
    end
    -- lgamma(x) = -log x - gamma x + O(x^2)
    for _, x in ipairs { 1e-20, 1e-300, 5e-324 } do xs[#xs + 1], want[#want + 1] = x, -math.log(x) - EULER * x end
    check(xs, want, tide.lgamma, 4, "lgamma")
  end)

  it("is +inf at 0, the negative integers and the infinities, 0 at 1 and 2", function()
    H.equal(tide.tensor({ 0, -0.0, -1, -2, -50, -1e20, inf, -inf, nan, 1, 2 }, "float64"):lgamma(),
      { inf, inf, inf, inf, inf, inf, inf, inf, nan, 0, 0 })
  end)
end)

describe("digamma", function()
  it("is -gamma + H(n-1) at the integers and Gauss's values at rationals", function()
    local xs, want, h = {}, {}, 0
    for n = 1, 30 do
      xs[#xs + 1], want[#want + 1] = n, sum(-EULER, h)
      h = h + 1 / n
    end
    local odd = 0
    for n = 0, 20 do   -- digamma(n + 1/2) = -gamma - 2 log 2 + sum_{k<=n} 2 / (2k - 1)
      if n > 0 then odd = odd + 2 / (2 * n - 1) end
      xs[#xs + 1], want[#want + 1] = n + 0.5, sum(-EULER, -2 * LN2, odd)
    end
    local rational = {
      [0.25] = sum(-EULER, -PI / 2, -3 * LN2), [0.75] = sum(-EULER, PI / 2, -3 * LN2),
      [1 / 3] = sum(-EULER, -PI / (2 * SQRT3), -1.5 * LN3), [2 / 3] = sum(-EULER, PI / (2 * SQRT3), -1.5 * LN3),
      [1 / 6] = sum(-EULER, -PI * SQRT3 / 2, -2 * LN2, -1.5 * LN3),
      [5 / 6] = sum(-EULER, PI * SQRT3 / 2, -2 * LN2, -1.5 * LN3),
    }
    for x, v in pairs(rational) do xs[#xs + 1], want[#want + 1] = x, v end
    check(xs, want, tide.digamma, 6, "digamma")
  end)

  it("keeps its relative accuracy at its positive root and at the extremes", function()
    -- x0 = 1.46163214496836234126...; the double below it is 9.549995429965697e-17
    -- under x0, where digamma is trigamma(x0) = 0.96767224544762117 times that
    local below = 1.4616321449683622
    local xs = { below, 1e6, 1e15, 1e300, 1e-300, 0.001 }
    local want = { -0.96767224544762117 * 9.549995429965697e-17 }
    for i = 2, 4 do local x = xs[i]; want[i] = math.log(x) - 0.5 / x - 1 / (12 * x * x) end
    want[5] = -1e300 - EULER
    -- digamma(x) = -1/x - gamma + zeta(2) x - zeta(3) x^2 + zeta(4) x^3 - zeta(5) x^4 + ...
    want[6] = -1000 - EULER + PI ^ 2 / 6 * 0.001 - ZETA3 * 1e-6 + PI ^ 4 / 90 * 1e-9 - 1.0369277551433699 * 1e-12
    check(xs, want, tide.digamma, 4, "digamma")
  end)

  it("reflects below zero and has PyTorch's values at the poles", function()
    -- digamma(1 - x) - digamma(x) = pi cot(pi x): cot is 0 at the half-integers
    local xs = { -0.5, -1.5, -10.5, -0.25, -0.75 }
    local odd = 0
    for k = 1, 11 do odd = odd + 2 / (2 * k - 1) end
    local want = { sum(2, -EULER, -2 * LN2), sum(2 + 2 / 3, -EULER, -2 * LN2), sum(odd, -EULER, -2 * LN2),
                   sum(-EULER, -PI / 2, -3 * LN2, 4, PI), sum(-EULER, PI / 2, -3 * LN2, 4 / 3, -PI) }
    check(xs, want, tide.digamma, 8, "digamma")
    H.equal(tide.tensor({ 0, -0.0, -1, -7, -1e20, -inf, inf, nan }, "float64"):digamma(),
      { -inf, inf, nan, nan, nan, nan, inf, nan })
  end)
end)

describe("polygamma", function()
  it("n = 1 (trigamma): zeta values, Catalan's constant, the reflection and the asymptotic series", function()
    local xs = { 1, 0.5, 2, 3, 0.25, 0.75, -0.5, -1.5 }
    local want = { PI ^ 2 / 6, PI ^ 2 / 2, sum(PI ^ 2 / 6, -1), sum(PI ^ 2 / 6, -1.25), PI ^ 2 + 8 * CATALAN,
                   sum(PI ^ 2, -8 * CATALAN), PI ^ 2 / 2 + 4, PI ^ 2 / 2 + 4 + 4 / 9 }
    for _, x in ipairs { 20, 100, 12345.25, 1e10 } do   -- 1/x + 1/(2x^2) + sum B_2k / x^(2k+1)
      xs[#xs + 1] = x
      want[#want + 1] = 1 / x + 1 / (2 * x ^ 2) + 1 / (6 * x ^ 3) - 1 / (30 * x ^ 5) + 1 / (42 * x ^ 7) -
                        1 / (30 * x ^ 9) + 5 / (66 * x ^ 11)
    end
    xs[#xs + 1], want[#want + 1] = 1e-10, 1e20 + PI ^ 2 / 6
    check(xs, want, function(t) return tide.polygamma(1, t) end, 6, "trigamma")
  end)

  it("n >= 2: (-1)^(n+1) n! zeta(n+1) at 1, times 2^(n+1) - 1 at 1/2", function()
    for _, n in ipairs { 2, 3, 4, 5, 8, 13, 20, 40 } do
      local z = n == 2 and ZETA3 or n == 3 and PI ^ 4 / 90 or zeta(n + 1)
      local v = (n % 2 == 1 and 1 or -1) * fact(n) * z
      check({ 1, 0.5 }, { v, v * (2 ^ (n + 1) - 1) }, function(t) return tide.polygamma(n, t) end,
        n <= 5 and 6 or 3 * n, "polygamma " .. n)
    end
    -- even n at a negative half-integer: the cot term vanishes, psi''(-1/2) = psi''(3/2)
    check({ -0.5, -2.5 }, { sum(16, -14 * ZETA3), sum(16, 16 / 27, 16 / 125, -14 * ZETA3) },
      function(t) return tide.polygamma(2, t) end, 6, "polygamma 2")
    -- large n: the first terms of n! sum (x + k)^-(n+1)
    local x, n = 0.7, 70
    check({ x }, { -fact(n) * (x ^ -71 + (x + 1) ^ -71) }, function(t) return tide.polygamma(n, t) end, 60,
      "polygamma 70")
  end)

  it("n = 0 is digamma, and poles give (-1)^(n+1) inf", function()
    local x = tide.tensor({ 0.3, 2, -1.7, 1e5 }, "float64")
    H.equal(tide.polygamma(0, x), x:digamma())
    H.equal(tide.polygamma(1, tide.tensor({ 0, -0.0, -3, inf, -inf, nan }, "float64")), { inf, inf, inf, 0, nan, nan })
    H.equal(tide.polygamma(2, tide.tensor({ 0, -3, inf }, "float64")), { -inf, -inf, 0 })
    H.equal(tide.polygamma(5, tide.tensor({ -1e20 }, "float64")), { inf })
  end)

  it("satisfies the recurrence psi^(n)(x + 1) = psi^(n)(x) + (-1)^n n! / x^(n+1)", function()
    local xs = {}
    for k = 1, 64 * 24, 7 do xs[#xs + 1] = k / 64 end   -- x + 1 exact
    local x = tide.tensor(xs, "float64")
    for n = 0, 4 do
      local a, b = tide.polygamma(n, x):totable(), tide.polygamma(n, x + 1):totable()
      for i, v in ipairs(xs) do
        local step = (n % 2 == 0 and 1 or -1) * fact(n) / v ^ (n + 1)
        local err = math.abs(b[i] - a[i] - step)
        assert.is_true(err <= 8 * ULP * (math.abs(a[i]) + math.abs(b[i])),
          ("n = %d, x = %.17g: %.3g"):format(n, v, err))
      end
    end
  end)

  it("satisfies the reflection psi(1 - x) - psi(x) = pi cot(pi x), and its derivative", function()
    local xs = {}
    for k = 1, 64 * 6 do if k % 64 ~= 0 then xs[#xs + 1] = -k / 64 end end
    local x = tide.tensor(xs, "float64")
    local d0, d0r = x:digamma():totable(), (1 - x):digamma():totable()
    local d1, d1r = tide.polygamma(1, x):totable(), tide.polygamma(1, 1 - x):totable()
    for i, v in ipairs(xs) do
      local r = v - math.floor(v + 0.5)   -- exact: sin(pi r) keeps its relative accuracy
      local s = math.sin(PI * r)
      local cot = math.cos(PI * r) / s
      assert.is_true(math.abs(d0r[i] - d0[i] - PI * cot) <= 8 * ULP * (math.abs(d0[i]) + math.abs(d0r[i]) + 4),
        "digamma at " .. v)
      local csc2 = PI * PI / (s * s)
      assert.is_true(math.abs(d1r[i] + d1[i] - csc2) <= 8 * ULP * csc2, "trigamma at " .. v)
    end
  end)

  it("names the op for a bad n", function()
    local x = tide.ones(2)
    assert.has_error(function() tide.polygamma(-1, x) end, "polygamma: n must be a non-negative integer, got -1")
    assert.has_error(function() x:polygamma(1.5) end, "polygamma: n must be a non-negative integer, got 1.5")
    assert.has_error(function() x:polygamma() end, "polygamma: n must be a non-negative integer, got nil")
  end)
end)

describe("the gamma family", function()
  local VALUES = { 0.1, 0.5, 1, 1.4616321449683622, 2.5, 7, 33.3, 1e5, -0.5, -3.3, -11.75, 0, -2, inf, nan }

  it("gives float32 the float64 result rounded once", function()
    local x = tide.tensor(VALUES, "float32")
    local xd = x:double()
    for _, f in ipairs {
      function(t) return t:lgamma() end, function(t) return t:digamma() end,
      function(t) return t:polygamma(1) end, function(t) return t:polygamma(4) end,
    } do
      local got = f(x)
      assert.are.equal("float32", got:dtype())
      H.equal(got, f(xd):float())
    end
    -- integers compute in float32
    assert.are.equal("float32", tide.tensor({ 1, 2 }, "int64"):digamma():dtype())
  end)

  it("runs in every layout, 0-d and empty, and in place", function()
    local x = tide.tensor({ { 0.1, 0.5, 1, 2.5 }, { 7, -0.5, -3.3, 33.3 } }, "float64")
    for name, t in pairs(H.layouts(x)) do
      H.equal(t:lgamma(), x:lgamma(), name)
      H.equal(t:polygamma(3), x:polygamma(3), name)
    end
    H.equal(tide.tensor(2.5, "float64"):digamma(), tide.tensor({ 2.5 }, "float64"):digamma()[1])
    assert.are.same({ 0, 3 }, tide.zeros(0, 3):lgamma():shape())
    local y = x:clone()
    assert.are.equal(y, y:digamma_())
    H.equal(y, x:digamma())
    y = x:clone()
    y:lgamma_()
    H.equal(y, x:lgamma())
    y = x:clone()
    y:polygamma_(2)
    H.equal(y, x:polygamma(2))
  end)

  it("differentiates twice: lgamma' = digamma, lgamma'' = trigamma, polygamma(n)' = polygamma(n + 1)", function()
    local x = tide.tensor({ -1.3, -0.4, 0.2, 0.7, 1.6, 9.5 }, "float64"):requires_grad_()
    local g = tide.autograd.grad(x:lgamma():sum(), x, nil, { create_graph = true })
    H.equal(g, x:detach():digamma())
    H.equal(tide.autograd.grad(g:sum(), x), tide.polygamma(1, x:detach()))
    g = tide.autograd.grad(x:polygamma(3):sum(), x, nil, { create_graph = true })
    H.equal(g, x:detach():polygamma(4))
    H.equal(tide.autograd.grad(g:sum(), x), x:detach():polygamma(5))
    assert.is_true(tide.autograd.gradcheck(function(a) return a:digamma() end, { x }))
  end)
end)

describe("i0, i0e, i1, i1e", function()
  -- I0 and I1 by their power series (positive terms) to 25, the asymptotic series of
  -- exp(-x) sqrt(2 pi x) I(x) above: sum (-1)^k prod_{j<=k} (4 nu^2 - (2j-1)^2) / (k! (8x)^k)
  local function series(order, a)
    local q, t, s = a * a / 4, 1, 1
    for k = 1, 200 do
      t = t * q / (k * (k + order))
      s = s + t
      if t < 1e-18 * s then break end
    end
    return order == 1 and a / 2 * s or s
  end
  local function scaled_asym(order, a)   -- exp(-a) I(a)
    local mu, t, s = 4 * order * order, 1, 1
    for k = 1, 40 do
      t = -t * (mu - (2 * k - 1) ^ 2) / (k * 8 * a)
      s = s + t
      if math.abs(t) < 1e-18 then break end
    end
    return s / math.sqrt(2 * PI * a)
  end
  local function ref(order, scaled, x)
    local a = math.abs(x)
    local r
    if a <= 25 then r = scaled and series(order, a) * math.exp(-a) or series(order, a)
    else r = scaled and scaled_asym(order, a) or scaled_asym(order, a) * math.exp(a / 2) * math.exp(a / 2) end
    if order == 1 and x < 0 then r = -r end
    return r
  end

  it("follow their series within 10 ulp, in float64, and float32 as float64 rounded", function()
    local xs = { 1e-300, 1e-8, 0.001, 0.5, -1, 2.5, -7.9, 8, 8.5, -11, 20, 24.5, 30, -60, 123.25, 600, -705, 712 }
    for _, op in ipairs { { "i0", 0, false }, { "i0e", 0, true }, { "i1", 1, false }, { "i1e", 1, true } } do
      local want = {}
      for i, x in ipairs(xs) do want[i] = ref(op[2], op[3], x) end
      check(xs, want, function(t) return t[op[1]](t) end, 10, op[1])
      local x32 = tide.tensor(xs, "float32")
      H.equal(x32[op[1]](x32), x32:double()[op[1]](x32:double()):float(), op[1])
    end
    -- the limits, zero's sign, NaN
    H.equal(tide.tensor({ 0, -0.0, inf, -inf, nan, 714 }, "float64"):i0(), { 1, 1, inf, inf, nan, inf })
    H.equal(tide.tensor({ 0, inf, -inf, nan }, "float64"):i0e(), { 1, 0, 0, nan })
    local z = tide.tensor({ -0.0, inf, -inf, nan, -714 }, "float64")
    H.equal(z:i1(), { 0, inf, -inf, nan, -inf })
    assert.are.equal(-inf, 1 / z:i1():totable()[1])
    H.close(z:i1e(), { 0, 0, 0, nan, -ref(1, true, 714) }, 1e-15, 0)
  end)

  it("differentiate as I0' = I1 and I1' = I0 - I1 / x (1/2 at 0)", function()
    local x = tide.tensor({ -9, -0.5, 0, 0.25, 3, 12 }, "float64"):requires_grad_()
    H.equal(tide.autograd.grad(x:i0():sum(), x), x:detach():i1())
    local g = tide.autograd.grad(x:i1():sum(), x):totable()
    local xd = x:detach()
    local i0v, i1v = xd:i0():totable(), xd:i1():totable()
    for i, v in ipairs(xd:totable()) do
      local want = v == 0 and 0.5 or i0v[i] - i1v[i] / v
      assert.is_true(math.abs(g[i] - want) <= 1e-15 * math.abs(want), "i1' at " .. v)
    end
    assert.is_true(tide.autograd.gradcheck(function(a) return a:i0e() + a:i1e() end, { x }))
  end)
end)

-- -- tide.special ------------------------------------------------------------------------------

-- log erfc(a) for a >= 0 (after transcend_spec's reference): the Taylor series of erf below
-- 1/2; above, the logarithm of Laplace's continued fraction, which does not underflow (with
-- 2000 terms it is within 1 ulp of mpmath's from 0.3 on).
local SQRTPI = math.sqrt(PI)
local function erf_series(a)
  local s, term, k = a, a, 0
  repeat
    k = k + 1
    term = -term * a * a / k
    local add = term / (2 * k + 1)
    s = s + add
  until math.abs(add) <= 1e-17 * math.abs(s)
  return 2 / SQRTPI * s
end
local function erfc_cf(a)   -- the continued fraction's denominator
  local f = a
  for k = 2000, 1, -1 do f = a + (k / 2) / f end
  return f
end
local function log_erfc(a)
  if a < 0.5 then return math.log(1 - erf_series(a)) end
  return -a * a - 0.5 * math.log(PI) - math.log(erfc_cf(a))
end
local function log1p(x)   -- Goldberg's
  local u = 1 + x
  if u == 1 then return x end
  return math.log(u) * x / (u - 1)
end
-- log Phi(x) and Phi(x)
local function log_ndtr(x)
  if x < 0 then return log_erfc(-x * math.sqrt(0.5)) - LN2 end
  return log1p(-0.5 * math.exp(log_erfc(x * math.sqrt(0.5))))
end

describe("tide.special", function()
  local S = tide.special

  it("log_ndtr and ndtr in both tails, in float64 and float32", function()
    local xs = { -1e150, -1e10, -1e3, -38.5, -30, -20.5, -20, -19.5, -12, -10.5, -10, -9.5, -5, -1.5, -1, -0.5,
                 0, 0.5, 1, 2.5, 5, 8 }
    local want = {}
    -- the argument's rounding in x / sqrt 2 grows by 2 x^2 in erfc, on both sides
    for i, x in ipairs(xs) do want[i] = log_ndtr(x) end
    local got = S.log_ndtr(tide.tensor(xs, "float64")):totable()
    local got32 = S.log_ndtr(tide.tensor(xs, "float32")):totable()
    local ndtr = S.ndtr(tide.tensor(xs, "float64")):totable()
    for i, x in ipairs(xs) do
      local tol = (8 + 2 * math.min(x * x, 100)) * ULP * math.abs(want[i])
      assert.is_true(math.abs(got[i] - want[i]) <= tol,
        ("log_ndtr(%g): %.17g, expected %.17g"):format(x, got[i], want[i]))
      local w32 = log_ndtr(tide.tensor(x, "float32"):item())
      local tol32 = (8 + 2 * math.min(x * x, 100)) * 2 ^ -23 * math.abs(w32)
      assert.is_true(got32[i] == w32 or math.abs(got32[i] - w32) <= tol32,
        ("float32 log_ndtr(%g): %.9g, expected %.9g"):format(x, got32[i], w32))
      local p = math.exp(want[i])
      if p > 1e-300 then
        assert.is_true(math.abs(ndtr[i] - p) <= tol + 8 * ULP * p,
          ("ndtr(%g): %.17g, expected %.17g"):format(x, ndtr[i], p))
      end
    end
    H.equal(S.log_ndtr(tide.tensor({ inf, -inf, nan }, "float64")), { 0, -inf, nan })
  end)

  it("ndtri inverts ndtr to the far tails", function()
    local xs = { -37, -30, -20, -10, -5, -2, -1, -0.5, -0.1, 0.1, 0.5, 1, 2, 5, 8 }
    local ps = {}
    for i, x in ipairs(xs) do
      ps[i] = x < 0 and math.exp(log_ndtr(x)) or 1 - math.exp(log_ndtr(-x))
    end
    local got = S.ndtri(tide.tensor(ps, "float64")):totable()
    for i, x in ipairs(xs) do
      -- p = Phi(x) is rounded to 2^-53 of itself (of 1 above 1/2): x moves by that over the slope
      local dp = x < 0 and ps[i] or 1
      local tol = 4 * ULP * math.abs(x) + 2 * ULP * dp * math.exp(0.5 * x * x) * math.sqrt(2 * PI)
      assert.is_true(math.abs(got[i] - x) <= tol, ("ndtri(%.17g): %.17g, expected %g"):format(ps[i], got[i], x))
    end
    H.close(S.ndtri(tide.tensor({ 0.975, 0.5, 0.025 }, "float32")), { 1.959963984540054, 0, -1.959963984540054 },
      4e-7, 0)
    H.equal(S.ndtri(tide.tensor({ 0, 1, -0.5, 1.5, nan }, "float64")), { -inf, inf, nan, nan, nan })
  end)

  it("sinc, entr, logit, xlog1py and expit", function()
    H.close(S.sinc(tide.tensor({ 0, 0.5, -1.5, 2.25 }, "float64")),
      { 1, 2 / PI, -2 / (3 * PI), math.sin(2.25 * PI) / (2.25 * PI) }, 1e-15, 1e-16)
    H.close(S.entr(tide.tensor({ 0, 0.5, 2, -1, nan }, "float64")), { 0, 0.5 * LN2, -2 * LN2, -inf, nan }, 1e-15)
    H.close(S.logit(tide.tensor({ 0.25, 0.5, 0.9 }, "float64")), { -LN3, 0, math.log(9) }, 1e-15, 1e-16)
    H.close(S.logit(tide.tensor({ 0, 1 }, "float64"), 0.01), { -math.log(99), math.log(99) }, 1e-14)
    H.close(S.xlog1py(tide.tensor({ 0, 0, 2, 3 }, "float64"), tide.tensor({ -1, 5, 1, nan }, "float64")),
      { 0, 0, 2 * LN2, nan }, 1e-15)
    H.close(S.xlog1py(2, tide.tensor({ 1e-20 }, "float64")), { 2e-20 }, 1e-15)
    H.equal(S.expit(tide.tensor({ 0 }, "float64")), { 0.5 })
    H.equal(S.psi(tide.tensor({ 1 }, "float64")), { -EULER })
    H.equal(S.gammaln(tide.tensor({ 3 }, "float64")), { LN2 })
    H.equal(S.i0(tide.tensor({ 0 }, "float64")), { 1 })
    assert.are.equal("float32", S.sinc(tide.tensor({ 1, 2 }, "int64")):dtype())
  end)

  it("multigammaln: lgamma for p = 1, Legendre's duplication for p = 2, the sum above", function()
    local a = tide.tensor({ 1.5, 2, 7.25 }, "float64")
    H.equal(S.multigammaln(a, 1), a:lgamma())
    -- Gamma(a) Gamma(a - 1/2) = 2^(2 - 2a) sqrt(pi) Gamma(2a - 1)
    local want = {}
    for i, v in ipairs { 1.5, 2, 7.25 } do
      want[i] = math.log(PI) + (2 - 2 * v) * LN2 + tide.tensor(2 * v - 1, "float64"):lgamma():item()
    end
    H.close(S.multigammaln(a, 2), want, 1e-14, 1e-15)
    H.close(S.multigammaln(a, 3), S.multigammaln(a, 2) + (a - 1):lgamma() + math.log(PI), 1e-14)
  end)

  it("softmax and log_softmax in the dtype asked for", function()
    local x = tide.tensor({ { 1, 2, 3 }, { 0, 0, 0 } })
    H.equal(S.softmax(x, 2), x:softmax(2))
    H.equal(S.log_softmax(x, -1, "float64"), x:double():log_softmax(-1))
    H.equal(S.logsumexp(x, 2), x:logsumexp(2))
  end)

  it("gradients through every branch", function()
    local gradcheck = tide.autograd.gradcheck
    local x = tide.tensor({ -30, -15, -5, -0.5, 2, 6 }, "float64"):requires_grad_()
    assert.is_true(gradcheck(S.log_ndtr, { x }))
    assert.is_true(gradcheck(S.ndtr, { x }))
    assert.is_true(gradcheck(S.sinc, { tide.tensor({ 0, 0.3, -1.7 }, "float64"):requires_grad_() }))
    local p = tide.tensor({ 1e-4, 0.001, 0.3, 0.5, 0.9 }, "float64"):requires_grad_()   -- 1e-6 from the ends
    assert.is_true(gradcheck(S.ndtri, { p }))
    assert.is_true(gradcheck(function(v) return S.logit(v) + S.entr(v) end, { p }))
    assert.is_true(gradcheck(S.xlog1py, { p, tide.tensor({ 0.5, 1, 2, 3, 4 }, "float64"):requires_grad_() }))
    assert.is_true(gradcheck(function(v) return S.multigammaln(v, 3) end,
      { tide.tensor({ 1.5, 4 }, "float64"):requires_grad_() }))
  end)

  it("names the function and the argument in its errors", function()
    assert.has_error(function() S.log_ndtr(1) end, "special.log_ndtr: argument 1 must be a tensor, got number")
    assert.has_error(function() S.multigammaln(tide.ones(1), 0) end,
      "special.multigammaln: p must be a positive integer, got 0")
    assert.has_error(function() S.multigammaln(tide.ones(1), 3) end,
      "special.multigammaln: all elements must be greater than (p-1)/2 = 1")
    assert.has_error(function() S.xlog1py(1, 2) end, "special.xlog1py: at least one argument must be a tensor")
  end)
end)
