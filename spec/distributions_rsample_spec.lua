-- distributions_rsample_spec: the reparameterised draws of the gamma family (Gamma,
-- Chi2, Beta, Dirichlet, and StudentT's df). The implicit gradient dx/dalpha against a
-- plain-Lua float64 reference (the inverse CDF at a fixed quantile, by bisection on a
-- regularised incomplete gamma, differentiated by central differences); seeded Monte Carlo
-- means of the gradients against d/dalpha E[x] within 5 standard errors; the moments of the
-- draws; float32; and the device (#cuda, or a printed reason).
local tide = require "tide"
local H = require "spec.helpers"
local CC = require "spec.helpers.cuda_compare"
local D = tide.distributions

-- -- the reference, in plain Lua ----------------------------------------------------------------

-- log Gamma(z) by Lanczos (g = 7, 9 terms; relative error near 1e-15), reflected below 1/2
local LANCZOS = { 0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
  -176.61502916214059, 12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6,
  1.5056327351493116e-7 }
local function lgamma(z)
  if z < 0.5 then return math.log(math.pi / math.sin(math.pi * z)) - lgamma(1 - z) end
  z = z - 1
  local s = LANCZOS[1]
  for i = 2, 9 do s = s + LANCZOS[i] / (z + i - 1) end
  local t = z + 7.5
  return 0.5 * math.log(2 * math.pi) + (z + 0.5) * math.log(t) - t + math.log(s)
end

-- P(a, x): the series below a + 1, else 1 - Q by Lentz's continued fraction
local function igamma(a, x)
  local pre = math.exp(a * math.log(x) - x - lgamma(a))
  if x < a + 1 then
    local t, s, n = 1 / a, 1 / a, 0
    repeat n = n + 1; t = t * x / (a + n); s = s + t until t < s * 1e-17
    return pre * s
  end
  local tiny = 1e-300
  local b, c = x + 1 - a, 1 / tiny
  local d = 1 / b
  local h = d
  for i = 1, 10000 do
    local an = -i * (i - a)
    b = b + 2
    d = an * d + b; if math.abs(d) < tiny then d = tiny end
    c = b + an / c; if math.abs(c) < tiny then c = tiny end
    d = 1 / d
    local del = d * c
    h = h * del
    if math.abs(del - 1) < 1e-16 then break end
  end
  return 1 - pre * h
end

-- log x for P(a, x) = u, by bisection on log x
local function log_quantile(a, u)
  local lo, hi = -750, math.log(a + 50 * math.sqrt(a) + 50)
  for _ = 1, 200 do
    local mid = 0.5 * (lo + hi)
    if igamma(a, math.exp(mid)) < u then lo = mid else hi = mid end
  end
  return 0.5 * (lo + hi)
end

-- x(a) and dx/da at fixed u: central differences of log x, which is smooth in a even where
-- x is tiny (x ~ (u Gamma(a + 1))^(1/a) for small u)
local function reference(a, u)
  local h = 1e-5 * a
  local lx = log_quantile(a, u)
  local dl = (log_quantile(a + h, u) - log_quantile(a - h, u)) / (2 * h)
  return math.exp(lx), math.exp(lx) * dl
end

local ALPHAS = { 0.1, 0.5, 1, 2.5, 10, 100 }
local QUANTILES = { 1e-3, 0.05, 0.3, 0.5, 0.7, 0.95, 0.999 }
-- Below alpha = 20 the series and the upper-tail sum meet this reference to 3e-10 (1e-9
-- allowed); above, Temme's expansion cut after c1 is within the 0.006 / alpha^2
-- documented in distributions.lua (1.5e-7 of 6e-7 at alpha = 100).
local function bound(a) return a < 20 and 1e-9 or 0.006 / (a * a) end

local function cases()
  local as, xs, want = {}, {}, {}
  for _, a in ipairs(ALPHAS) do
    for _, u in ipairs(QUANTILES) do
      local x, g = reference(a, u)
      as[#as + 1], xs[#xs + 1], want[#want + 1] = a, x, g
    end
  end
  return as, xs, want
end

-- mean of a flat list and its standard error
local function mean_se(v)
  local n, m, s2 = #v, 0, 0
  for _, x in ipairs(v) do m = m + x end
  m = m / n
  for _, x in ipairs(v) do s2 = s2 + (x - m) ^ 2 end
  return m, math.sqrt(s2 / (n - 1) / n)
end
local function flat(t) return H.flat(t:double():cpu():totable()) end
local function leaf(v, n, dt) return tide.full({ n }, v, { dtype = dt or "float64" }):requires_grad_() end

local function within_se(got, want, what)
  local m, se = mean_se(got)
  assert(math.abs(m - want) < 5 * se + 1e-12,
    string.format("%s: mean %.6g, want %.6g, 5 standard errors %.3g", what, m, want, 5 * se))
end

describe("distributions: the gamma draw's implicit gradient", function()
  it("matches the inverse CDF differentiated at a fixed quantile", function()
    local as, xs, want = cases()
    local g = D._standard_gamma_grad(tide.tensor(as, "float64"), tide.tensor(xs, "float64")):totable()
    local worst = 0
    for i = 1, #as do
      local rel = math.abs(g[i] - want[i]) / math.abs(want[i])
      worst = math.max(worst, rel / bound(as[i]))
      assert(rel < bound(as[i]), string.format("alpha %g, x %.17g: dx/dalpha %.17g, reference %.17g, rel %.3g",
        as[i], xs[i], g[i], want[i], rel))
    end
    assert(worst > 0.01, "the bound is not tight: the worst error is below 1% of it")
  end)

  it("is the float64 result, rounded, for float32", function()
    local as, xs = cases()
    local a32, x32 = tide.tensor(as, "float32"), tide.tensor(xs, "float32")
    local g32 = D._standard_gamma_grad(a32, x32)
    assert.equals("float32", g32:dtype())
    local g64 = D._standard_gamma_grad(a32:double(), x32:double()):totable()
    H.close(g32, g64, 1e-6, 0)
  end)
end)

describe("distributions: rsample of the gamma family", function()
  it("has_rsample", function()
    for _, d in ipairs { D.Gamma(2, 1), D.Chi2(3), D.Beta(1, 2), D.Dirichlet(tide.ones(3)), D.StudentT(3),
      D.Normal(0, 1), D.Independent(D.Gamma(tide.ones(2), 1), 1) } do
      assert.is_true(d.has_rsample, tostring(d))
    end
    assert.is_false(D.Poisson(2).has_rsample)
    assert.is_false(D.Independent(D.Poisson(tide.ones(2)), 1).has_rsample)
  end)

  it("Gamma: the mean gradient is d/dalpha E[x] = 1 / rate and d/drate E[x] = -alpha / rate^2", function()
    tide.manual_seed(11)
    local n = 20000
    for _, a in ipairs { 0.1, 1, 2.5, 10, 100 } do
      local al, r = leaf(a, n), leaf(2, n)
      D.Gamma(al, r):rsample():sum():backward()
      within_se(flat(al.grad), 0.5, "alpha " .. a)
      within_se(flat(r.grad), -a / 4, "rate, alpha " .. a)
    end
  end)

  it("Chi2: d/ddf E[x] = 1", function()
    tide.manual_seed(12)
    local k = leaf(3, 20000)
    D.Chi2(k):rsample():sum():backward()
    within_se(flat(k.grad), 1, "df")
  end)

  it("Beta: d/da E[X] = b / (a + b)^2, d/db E[X] = -a / (a + b)^2", function()
    tide.manual_seed(13)
    for _, ab in ipairs { { 0.5, 0.5 }, { 2, 3 }, { 20, 5 } } do
      local a, b = leaf(ab[1], 20000), leaf(ab[2], 20000)
      D.Beta(a, b):rsample():sum():backward()
      local s = ab[1] + ab[2]
      within_se(flat(a.grad), ab[2] / (s * s), "a " .. ab[1])
      within_se(flat(b.grad), -ab[1] / (s * s), "b " .. ab[2])
    end
  end)

  it("Dirichlet: d/dalpha_j E[X_1] = (1[j = 1] alpha_0 - alpha_1) / alpha_0^2", function()
    tide.manual_seed(14)
    local c = tide.tensor({ 1, 2, 3 }, "float64"):reshape({ 1, 3 }):expand({ 20000, 3 }):contiguous():requires_grad_()
    D.Dirichlet(c):rsample():select(2, 1):sum():backward()
    for j, want in ipairs { 5 / 36, -1 / 36, -1 / 36 } do
      within_se(flat(c.grad:select(2, j)), want, "alpha_" .. j)
    end
  end)

  it("StudentT: gradients reach df", function()
    tide.manual_seed(15)
    -- E[T^2] = df / (df - 2), so d/ddf E[T^2] = -2 / (df - 2)^2
    local k = leaf(6, 40000)
    local t = D.StudentT(k):rsample()
    t:mul(t):sum():backward()
    within_se(flat(k.grad), -2 / 16, "df")
  end)

  it("draws with the right moments, differentiable in float64 and float32", function()
    tide.manual_seed(16)
    for _, dt in ipairs { "float64", "float32" } do
      local a = tide.tensor(2.5, dt):requires_grad_()
      local x = D.Gamma(a, 2):rsample({ 40000 })
      assert.equals(dt, x:dtype())
      assert.is_true(x.requires_grad)
      local m, se = mean_se(flat(x))
      assert(math.abs(m - 1.25) < 5 * se, dt .. " Gamma mean " .. m)
      local v = flat(x)
      local s2 = 0
      for _, e in ipairs(v) do s2 = s2 + (e - m) ^ 2 end
      assert(math.abs(s2 / (#v - 1) / 0.625 - 1) < 0.05, dt .. " Gamma variance")
      x:sum():backward()
      assert.equals(dt, a.grad:dtype())
      local b = D.Beta(a, 1.5):rsample({ 40000 })
      local bm, bse = mean_se(flat(b))
      assert(math.abs(bm - 2.5 / 4) < 5 * bse, dt .. " Beta mean " .. bm)
      local d = D.Dirichlet(tide.tensor({ 1, 2, 3 }, dt)):rsample({ 1000 })
      H.close(d:sum(-1), tide.ones({ 1000 }, { dtype = dt }), dt == "float32" and 1e-6 or 1e-14, 0)
    end
  end)

  CC.on_gpu("on the device: the same gradient as the host's, and rsample backward", function()
    local as, xs = cases()
    local a, x = tide.tensor(as, "float64"), tide.tensor(xs, "float64")
    local host = D._standard_gamma_grad(a, x)
    local dev = D._standard_gamma_grad(a:to(CC.DEV), x:to(CC.DEV))
    assert.equals(CC.DEV, dev:device())
    H.close(dev:cpu(), host, 1e-12, 0)
    tide.manual_seed(17)
    local al = tide.full({ 20000 }, 2.5, { dtype = "float32", device = CC.DEV }):requires_grad_()
    D.Gamma(al, 1):rsample():sum():backward()
    within_se(flat(al.grad), 1, "alpha on the device")
  end)
end)
