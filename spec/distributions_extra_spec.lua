-- distributions_extra_spec: the distributions beyond Normal, Uniform, Bernoulli
-- and Categorical. Densities, entropies, moments and KL divergences against
-- closed forms computed here in plain Lua (parameters at integers and
-- half-integers, where lgamma and digamma are finite sums); seeded draws
-- against their moments within a few standard errors, and against their
-- probabilities for the discrete ones; draws inside tide.jit.compile, which
-- refuses reads to the host; shapes; gradients; the errors and validate_args.
local tide = require "tide"
local H = require "spec.helpers"
local D = tide.distributions

local PI, LN2, EULER = math.pi, math.log(2), 0.57721566490153286061
local LOG_2PI = math.log(2 * PI)
local gradcheck = tide.autograd.gradcheck

-- lgamma and digamma at positive integers and half-integers
local function lgamma(x)
  local s, v = 0, x == math.floor(x) and 1 or 0.5
  if v == 0.5 then s = 0.5 * math.log(PI) end
  while v < x do s = s + math.log(v); v = v + 1 end
  return s
end
local function digamma(x)
  local s, v = -EULER, 1
  if x ~= math.floor(x) then s, v = -EULER - 2 * LN2, 0.5 end
  while v < x do s = s + 1 / v; v = v + 1 end
  return s
end
local function fact(n) return math.exp(lgamma(n + 1)) end

local function f64(v) return tide.tensor(v, "float64") end

-- Mean and variance of t's elements, and the standard errors of both (the latter from
-- the fourth central moment).
local function moments(t)
  local v = H.flat(t:double():totable())
  local n, m = #v, 0
  for _, x in ipairs(v) do m = m + x end
  m = m / n
  local m2, m4 = 0, 0
  for _, x in ipairs(v) do
    local d = (x - m) ^ 2
    m2, m4 = m2 + d, m4 + d * d
  end
  m2, m4 = m2 / n, m4 / n
  return m, m2, math.sqrt(m2 / n), math.sqrt(math.max(m4 - m2 * m2, 0) / n)
end

-- Asserts that the draws have mean mu and variance var within 4.5 standard errors.
local function draws_like(x, mu, var, what)
  local m, v, se_m, se_v = moments(x)
  assert.is_true(math.abs(m - mu) <= 4.5 * math.sqrt(var / x:numel()),
    ("%s: mean %.6g, expected %.6g (%.1f se)"):format(what, m, mu, (m - mu) / se_m))
  assert.is_true(math.abs(v - var) <= 4.5 * se_v,
    ("%s: variance %.6g, expected %.6g (%.1f se)"):format(what, v, var, (v - var) / se_v))
end

-- Asserts that the frequency of each count k in the draws is within 4.5 standard errors of
-- pmf(k), for the counts up to the largest drawn with pmf above 1e-3.
local function counts_like(x, pmf, what)
  local n, freq, top = x:numel(), {}, 0
  for _, k in ipairs(H.flat(x:double():totable())) do
    freq[k] = (freq[k] or 0) + 1
    top = math.max(top, k)
  end
  local checked = 0
  for k = 0, top do
    local p = pmf(k)
    if p > 1e-3 then
      local f = (freq[k] or 0) / n
      assert.is_true(math.abs(f - p) <= 4.5 * math.sqrt(p * (1 - p) / n),
        ("%s: P(%d) drawn %.5f, expected %.5f"):format(what, k, f, p))
      checked = checked + 1
    end
  end
  assert.is_true(checked > 0, what)
end

describe("distributions: densities, entropies and moments", function()
  it("Exponential, Laplace, Gumbel, Cauchy and LogNormal", function()
    local x = f64({ 0.5, 2 })
    local e = D.Exponential(f64({ 2, 0.5 }))
    H.close(e:log_prob(x), { math.log(2) - 1, math.log(0.5) - 1 }, 1e-14)
    H.close(e:entropy(), { 1 - math.log(2), 1 - math.log(0.5) }, 1e-14)
    H.close(e:mean(), { 0.5, 2 }, 0)
    H.close(e:variance(), { 0.25, 4 }, 0)
    H.close(e:cdf(x), { 1 - math.exp(-1), 1 - math.exp(-1) }, 1e-14)
    H.close(e:icdf(e:cdf(x)), { 0.5, 2 }, 1e-14)

    local l = D.Laplace(f64({ 1, -1 }), f64({ 2, 0.5 }))
    H.close(l:log_prob(x), { -math.log(4) - 0.25, -math.log(1) - 6 }, 1e-14)
    H.close(l:entropy(), { 1 + math.log(4), 1 + math.log(1) }, 1e-14)
    H.close(l:variance(), { 8, 0.5 }, 1e-15)
    H.close(l:cdf(f64({ 1, 0 })), { 0.5, 1 - 0.5 * math.exp(-2) }, 1e-14)
    H.close(l:icdf(f64({ 0.5, 1 - 0.5 * math.exp(-2) })), { 1, 0 }, 1e-14, 1e-15)

    local g = D.Gumbel(f64(1), f64(2))
    local z = (0.5 - 1) / 2
    H.close(g:log_prob(f64(0.5)), -(z + math.exp(-z)) - math.log(2), 1e-14)
    H.close(g:entropy(), math.log(2) + 1 + EULER, 1e-14)
    H.close(g:mean(), 1 + 2 * EULER, 1e-15)
    H.close(g:variance(), 4 * PI ^ 2 / 6, 1e-15)
    H.close(g:icdf(g:cdf(f64(0.5))), 0.5, 1e-13)

    local c = D.Cauchy(f64(1), f64(2))
    H.close(c:log_prob(f64(3)), -math.log(PI * 2 * 2), 1e-14)
    H.close(c:entropy(), math.log(8 * PI), 1e-14)
    H.close(c:cdf(f64(3)), 0.75, 1e-15)
    H.close(c:icdf(f64(0.75)), 3, 1e-14)
    H.close(c:mean(), 0 / 0, 0)
    H.close(c:variance(), math.huge, 0)

    local ln = D.LogNormal(f64(0.5), f64(0.25))
    local y = 2
    local lz = (math.log(y) - 0.5) / 0.25
    H.close(ln:log_prob(f64(y)), -0.5 * lz * lz - math.log(0.25) - 0.5 * LOG_2PI - math.log(y), 1e-14)
    H.close(ln:entropy(), math.log(0.25) + 0.5 + 0.5 * LOG_2PI + 0.5, 1e-14)
    H.close(ln:mean(), math.exp(0.5 + 0.03125), 1e-15)
    H.close(ln:variance(), (math.exp(0.0625) - 1) * math.exp(1 + 0.0625), 1e-14)
  end)

  it("Gamma, Chi2, Beta, Dirichlet and StudentT", function()
    local g = D.Gamma(f64({ 3, 0.5 }), f64({ 2, 1.5 }))
    local x = f64({ 0.75, 2 })
    H.close(g:log_prob(x), { 3 * LN2 + 2 * math.log(0.75) - 1.5 - lgamma(3),
                             0.5 * math.log(1.5) - 0.5 * math.log(2) - 3 - lgamma(0.5) }, 1e-14)
    H.close(g:entropy(), { 3 - LN2 + lgamma(3) - 2 * digamma(3),
                           0.5 - math.log(1.5) + lgamma(0.5) + 0.5 * digamma(0.5) }, 1e-14)
    H.close(g:mean(), { 1.5, 1 / 3 }, 1e-15)
    H.close(g:variance(), { 0.75, 0.5 / 2.25 }, 1e-15)

    local chi = D.Chi2(f64(4))   -- Gamma(2, 1/2)
    H.close(chi:log_prob(f64(3)), 2 * math.log(0.5) + math.log(3) - 1.5 - lgamma(2), 1e-14)
    H.close(chi:mean(), 4, 0)
    H.close(chi:variance(), 8, 0)
    assert.are.equal("Chi2(df: [])", tostring(chi))

    local b = D.Beta(f64(2), f64(3))
    local lb = lgamma(2) + lgamma(3) - lgamma(5)
    H.close(b:log_prob(f64(0.25)), math.log(0.25) + 2 * math.log(0.75) - lb, 1e-14)
    H.close(b:entropy(), lb - digamma(2) - 2 * digamma(3) + 3 * digamma(5), 1e-14)
    H.close(b:mean(), 0.4, 1e-15)
    H.close(b:variance(), 6 / (25 * 6), 1e-15)

    local d = D.Dirichlet(f64({ { 1, 2, 3 }, { 0.5, 0.5, 2 } }))
    local p = f64({ 0.2, 0.3, 0.5 })
    local lb1 = lgamma(1) + lgamma(2) + lgamma(3) - lgamma(6)
    local lb2 = 2 * lgamma(0.5) + lgamma(2) - lgamma(3)
    H.close(d:log_prob(p), { math.log(0.3) + 2 * math.log(0.5) - lb1,
                             -0.5 * math.log(0.2) - 0.5 * math.log(0.3) + math.log(0.5) - lb2 }, 1e-14)
    H.close(d:entropy(), { lb1 + 3 * digamma(6) - (digamma(2) + 2 * digamma(3)),
                           lb2 + (3 - 3) * digamma(3) - (-0.5 * 2 * digamma(0.5) + digamma(2)) }, 1e-14)
    H.close(d:mean(), { { 1 / 6, 2 / 6, 3 / 6 }, { 1 / 6, 1 / 6, 4 / 6 } }, 1e-15)
    H.close(d:variance():select(1, 1), { 5 / 252, 8 / 252, 9 / 252 }, 1e-15)

    local t = D.StudentT(f64({ 5, 1.5, 0.5 }), f64(1), f64(2))
    local y = (2 - 1) / 2
    local zc = math.log(2) + 0.5 * math.log(5) + 0.5 * math.log(PI) + lgamma(2.5) - lgamma(3)
    H.close(t:log_prob(f64(2)):select(1, 1), -3 * math.log(1 + y * y / 5) - zc, 1e-14)
    H.close(t:entropy():select(1, 1),
      math.log(2) + 3 * (digamma(3) - digamma(2.5)) + 0.5 * math.log(5) + lgamma(2.5) + 0.5 * math.log(PI) - lgamma(3),
      1e-14)
    H.close(t:mean(), { 1, 1, 0 / 0 }, 0)
    H.close(t:variance(), { 4 * 5 / 3, math.huge, 0 / 0 }, 1e-15)
  end)

  it("MultivariateNormal from a covariance, a precision or a scale_tril", function()
    local S = f64({ { 2, 0.6 }, { 0.6, 1 } })
    local det = 2 - 0.36
    local inv = { { 1 / det, -0.6 / det }, { -0.6 / det, 2 / det } }
    local mu = f64({ 1, -1 })
    local forms = {
      D.MultivariateNormal(mu, { covariance_matrix = S }),
      D.MultivariateNormal(mu, { precision_matrix = f64(inv) }),
      D.MultivariateNormal(mu, { scale_tril = tide.linalg.cholesky(S) }),
    }
    local x = { 0.5, 0.25 }
    local d1, d2 = x[1] - 1, x[2] + 1
    local m = d1 * (inv[1][1] * d1 + inv[1][2] * d2) + d2 * (inv[2][1] * d1 + inv[2][2] * d2)
    for i, d in ipairs(forms) do
      H.close(d:log_prob(f64(x)), -0.5 * (2 * LOG_2PI + m + math.log(det)), 1e-14, 0, "form " .. i)
      H.close(d:entropy(), 1 + LOG_2PI + 0.5 * math.log(det), 1e-14, 0, "form " .. i)
      H.close(d:covariance_matrix(), S, 1e-14, 1e-15, "form " .. i)
      H.close(d:precision_matrix(), inv, 1e-13, 1e-15, "form " .. i)
      H.close(d:variance(), { 2, 1 }, 1e-14, 0, "form " .. i)
      H.close(d:mean(), mu, 0)
    end
    -- batch dims broadcast between loc and the matrix
    local b = D.MultivariateNormal(f64({ { 0, 0 }, { 1, 1 }, { 2, 2 } }), { covariance_matrix = S })
    assert.are.same({ 3 }, b.batch_shape)
    assert.are.same({ 2 }, b.event_shape)
    local want = {}
    for i, l in ipairs { 0, 1, 2 } do   -- x - loc_i
      local a1, a2 = 1 - l, -1 - l
      local q = a1 * (inv[1][1] * a1 + inv[1][2] * a2) + a2 * (inv[2][1] * a1 + inv[2][2] * a2)
      want[i] = -0.5 * (2 * LOG_2PI + q + math.log(det))
    end
    H.close(b:log_prob(f64({ 1, -1 })), want, 1e-14)
    assert.are.same({ 4, 3 }, b:log_prob(tide.zeros(4, 1, 2, "float64")):shape())
  end)

  it("Geometric, Poisson, Binomial and OneHotCategorical", function()
    local g = D.Geometric({ probs = f64({ 0.25, 1 }) })
    H.close(g:log_prob(f64({ 2, 0 })), { 2 * math.log(0.75) + math.log(0.25), 0 }, 1e-14)
    H.close(g:mean(), { 3, 0 }, 1e-15)
    H.close(g:variance(), { 12, 0 }, 1e-15)
    H.close(g:entropy():select(1, 1), -(0.75 * math.log(0.75) + 0.25 * math.log(0.25)) / 0.25, 1e-14)
    H.close(D.Geometric({ logits = f64(0) }):log_prob(3), 4 * math.log(0.5), 1e-14)

    local p = D.Poisson(f64({ 3.5, 0 }))
    H.close(p:log_prob(f64({ 4, 0 })), { 4 * math.log(3.5) - 3.5 - math.log(24), 0 }, 1e-14)
    H.close(p:log_prob(tide.tensor({ 2, 1 }, "int64")), { 2 * math.log(3.5) - 3.5 - LN2, -math.huge }, 1e-14)
    H.close(p:mean(), { 3.5, 0 }, 0)
    assert.has_error(function() p:entropy() end, "Poisson.entropy: has no closed form")

    local b = D.Binomial({ total_count = 10, probs = f64({ 0.3, 0, 1 }) })
    local k = f64({ 4, 0, 10 })
    H.close(b:log_prob(k), { math.log(210) + 4 * math.log(0.3) + 6 * math.log(0.7), 0, 0 / 0 }, 1e-14)
    H.close(b:mean(), { 3, 0, 10 }, 1e-15)
    H.close(b:variance(), { 2.1, 0, 0 }, 1e-15)
    local ent = 0
    for j = 0, 10 do
      local pj = fact(10) / (fact(j) * fact(10 - j)) * 0.3 ^ j * 0.7 ^ (10 - j)
      ent = ent - pj * math.log(pj)
    end
    H.close(D.Binomial({ total_count = 10, probs = f64(0.3) }):entropy(), ent, 1e-13)
    local bl = D.Binomial({ total_count = f64({ 5, 7 }), logits = f64(-1) })
    local q = 1 / (1 + math.exp(1))
    H.close(bl:log_prob(f64(2)), { math.log(10) + 2 * math.log(q) + 3 * math.log(1 - q),
                                   math.log(21) + 2 * math.log(q) + 5 * math.log(1 - q) }, 1e-13)

    local oh = D.OneHotCategorical({ probs = f64({ 1, 3 }) })
    H.close(oh:log_prob(f64({ 0, 1 })), math.log(0.75), 1e-15)
    H.close(oh:entropy(), -(0.25 * math.log(0.25) + 0.75 * math.log(0.75)), 1e-15)
    H.close(oh:mean(), { 0.25, 0.75 }, 1e-15)
    H.close(oh:variance(), { 0.1875, 0.1875 }, 1e-15)
  end)

  it("Independent sums log_prob and entropy over its event dims", function()
    local base = D.Normal(f64({ { 0, 1, 2 }, { 3, 4, 5 } }), 2)
    local ind = D.Independent(base, 1)
    assert.are.same({ 2 }, ind.batch_shape)
    assert.are.same({ 3 }, ind.event_shape)
    local x = f64({ 1, 1, 1 })
    H.close(ind:log_prob(x), base:log_prob(x):sum(2), 1e-15)
    H.close(ind:entropy(), base:entropy():sum(2), 1e-15)
    H.equal(ind:mean(), base:mean())
    local all = D.Independent(D.Independent(base, 1), 1)
    assert.are.same({}, all.batch_shape)
    assert.are.same({ 2, 3 }, all.event_shape)
    H.close(all:log_prob(x), base:log_prob(x):sum(), 1e-14)
    assert.are.same({ 4, 2, 3 }, ind:rsample({ 4 }):shape())
    assert.are.same({ 2, 3 }, D.Independent(D.Dirichlet(tide.ones(2, 3)), 1).event_shape)
  end)
end)

describe("distributions: seeded draws", function()
  local N = 40000

  it("continuous: moments within 4.5 standard errors", function()
    tide.manual_seed(21)
    draws_like(D.Exponential(2):sample(N), 0.5, 0.25, "Exponential")
    draws_like(D.Laplace(1, 2):sample(N), 1, 8, "Laplace")
    draws_like(D.Gumbel(1, 2):sample(N), 1 + 2 * EULER, 4 * PI ^ 2 / 6, "Gumbel")
    draws_like(D.LogNormal(0, 0.5):sample(N), math.exp(0.125), (math.exp(0.25) - 1) * math.exp(0.25), "LogNormal")
    draws_like(D.StudentT(6, 1, 2):sample(N), 1, 4 * 6 / 4, "StudentT")
    for _, ab in ipairs { { 0.3, 2 }, { 1, 1 }, { 2.5, 0.5 }, { 40, 4 } } do
      local a, r = ab[1], ab[2]
      draws_like(D.Gamma(a, r):sample(N), a / r, a / (r * r), "Gamma " .. a)
    end
    -- log draws test the shape: E log X = digamma(a) - log r, Var log X = trigamma(a)
    local lg = D.Gamma(f64(0.5), f64(2)):sample(N):log()
    draws_like(lg, digamma(0.5) - LN2, PI ^ 2 / 2, "log Gamma 0.5")
    draws_like(D.Chi2(3):sample(N), 3, 6, "Chi2")
    draws_like(D.Beta(2, 3):sample(N), 0.4, 0.04, "Beta")
    draws_like(D.Beta(0.5, 0.5):sample(N), 0.5, 0.125, "Beta 0.5")
    local dir = D.Dirichlet(tide.tensor({ 1, 2, 3 })):sample(N)
    H.close(dir:sum(2), tide.ones(N), 1e-5)
    draws_like(dir:select(2, 3), 0.5, 0.5 * 0.5 / 7, "Dirichlet")
    -- Cauchy has no moments: its quartiles are loc -+ scale
    local c = D.Cauchy(1, 2):sample(N)
    local below = c:lt(-1):double():mean():item()
    assert.is_true(math.abs(below - 0.25) < 4.5 * math.sqrt(0.25 * 0.75 / N), tostring(below))
  end)

  it("MultivariateNormal: mean and covariance", function()
    tide.manual_seed(22)
    local S = f64({ { 2, 0.6 }, { 0.6, 1 } })
    local x = D.MultivariateNormal(f64({ 1, -1 }), { covariance_matrix = S }):sample(N)
    assert.are.same({ N, 2 }, x:shape())
    draws_like(x:select(2, 1), 1, 2, "MVN 1")
    draws_like(x:select(2, 2), -1, 1, "MVN 2")
    draws_like((x:select(2, 1) - 1) * (x:select(2, 2) + 1), 0.6, 2 * 1 + 0.36, "MVN product")
  end)

  it("discrete: the probabilities of the counts", function()
    tide.manual_seed(23)
    local function poisson(l) return function(k) return math.exp(k * math.log(l) - l - lgamma(k + 1)) end end
    local function binom(n, p)
      return function(k)
        if k > n then return 0 end
        return math.exp(lgamma(n + 1) - lgamma(k + 1) - lgamma(n - k + 1) + k * math.log(p) + (n - k) * math.log(1 - p))
      end
    end
    counts_like(D.Poisson(3):sample(N), poisson(3), "Poisson 3")
    counts_like(D.Poisson(f64(25)):sample(N), poisson(25), "Poisson 25")
    draws_like(D.Poisson(f64(1e6)):sample(N), 1e6, 1e6, "Poisson 1e6")
    counts_like(D.Binomial({ total_count = 12, probs = 0.4 }):sample(N), binom(12, 0.4), "Binomial 12")
    counts_like(D.Binomial({ total_count = 60, probs = f64(0.5) }):sample(N), binom(60, 0.5), "Binomial 60")
    counts_like(D.Binomial({ total_count = 200, probs = f64(0.9) }):sample(N), binom(200, 0.9), "Binomial 200")
    draws_like(D.Binomial({ total_count = 1e7, probs = f64(0.2) }):sample(N), 2e6, 1.6e6, "Binomial 1e7")
    counts_like(D.Geometric({ probs = 0.3 }):sample(N), function(k) return 0.7 ^ k * 0.3 end, "Geometric")
    local oh = D.OneHotCategorical({ probs = tide.tensor({ 0.2, 0.3, 0.5 }) }):sample(N)
    H.close(oh:sum(2), tide.ones(N), 0)
    draws_like(oh:select(2, 3), 0.5, 0.25, "OneHotCategorical")
    -- a batch of different parameters in one call, each its own branch
    local mixed = D.Poisson(tide.tensor({ 0, 2, 10, 500 })):sample(N)
    for i, l in ipairs { 0, 2, 10, 500 } do draws_like(mixed:select(2, i), l, l, "Poisson batch " .. l) end
    local bm = D.Binomial({ total_count = tide.tensor({ 0, 5, 40, 40 }), probs = tide.tensor({ 0.5, 0.9, 0.5, 0.1 }) })
      :sample(N)
    for i, np in ipairs { { 0, 0.5 }, { 5, 0.9 }, { 40, 0.5 }, { 40, 0.1 } } do
      draws_like(bm:select(2, i), np[1] * np[2], np[1] * np[2] * (1 - np[2]), "Binomial batch " .. i)
    end
  end)

  -- on the CPU: on a CUDA device each fused chain of the samplers is compiled, which takes
  -- seconds on the fake device of make test-specs
  it("draws inside tide.jit.compile, which refuses reads to the host, and replays draw anew", H.on_cpu(function()
    local makers = {
      function(p) return D.Gamma(p, 1):sample({ 3 }) end,
      function(p) return D.Beta(p, p):sample({ 3 }) end,
      function(p) return D.Dirichlet(p):sample({ 3 }) end,
      function(p) return D.StudentT(p):rsample({ 3 }) end,
      function(p) return D.Poisson(p * 20):sample({ 3 }) end,
      function(p) return D.Binomial({ total_count = 50, probs = p / 4 }):sample({ 3 }) end,
      function(p) return D.Geometric({ probs = p / 4 }):sample({ 3 }) end,
    }
    for i, fn in ipairs(makers) do
      local f = tide.jit.compile(fn, { warmup = 0 })
      local p = tide.tensor({ 0.5, 1, 2 })
      local a, b = f(p), f(p)
      assert.are.same({ 3, 3 }, a:shape(), "maker " .. i)
      assert.is_false(a:equal(b), "maker " .. i)
    end
  end))
end)

describe("distributions: shapes", function()
  it("sample_shape .. batch_shape .. event_shape for every distribution", function()
    local b = tide.ones(2, 3)
    local cases = {
      { D.Exponential(b), {} }, { D.Laplace(b, 1), {} }, { D.LogNormal(0, b), {} }, { D.Gumbel(b, b), {} },
      { D.Cauchy(0, b), {} }, { D.Gamma(b, 2), {} }, { D.Chi2(b), {} }, { D.Beta(b, b), {} },
      { D.StudentT(b), {} }, { D.Poisson(b), {} }, { D.Geometric({ probs = b * 0.5 }), {} },
      { D.Binomial({ total_count = 4, probs = b * 0.5 }), {} },
      { D.Dirichlet(tide.ones(2, 3, 4)), { 4 } }, { D.OneHotCategorical({ logits = tide.ones(2, 3, 4) }), { 4 } },
      { D.MultivariateNormal(tide.zeros(2, 3, 4), { scale_tril = tide.eye(4) }), { 4 } },
      { D.Independent(D.Normal(tide.zeros(2, 3, 4), 1), 1), { 4 } },
    }
    for i, c in ipairs(cases) do
      local d, ev = c[1], c[2]
      assert.are.same({ 2, 3 }, d.batch_shape, "case " .. i)
      assert.are.same(ev, d.event_shape, "case " .. i)
      local want = { 5, 2, 3 }
      for _, v in ipairs(ev) do want[#want + 1] = v end
      local s = d:sample({ 5 })
      assert.are.same(want, s:shape(), tostring(d))
      assert.are.same({ 5, 2, 3 }, d:log_prob(s):shape(), tostring(d))
      table.remove(want, 1)
      assert.are.same(want, d:sample():shape(), tostring(d))
      assert.are.same(want, d:mean():shape(), tostring(d))
      assert.are.same(want, d:variance():shape(), tostring(d))
    end
  end)
end)

describe("distributions: gradients", function()
  -- rsample with the noise fixed by the seed, so that gradcheck's calls draw the same
  local function seeded(f) return function(...) tide.manual_seed(7); return f(...) end end
  local function leaf(v) return f64(v):requires_grad_() end

  it("flow through rsample into the parameters", function()
    local loc, scale = leaf({ 0.5, -1 }), leaf({ 1.5, 0.3 })
    for name, make in pairs {
      Laplace = D.Laplace, LogNormal = D.LogNormal, Gumbel = D.Gumbel, Cauchy = D.Cauchy,
      StudentT = function(l, s) return D.StudentT(4, l, s) end,
    } do
      assert.is_true(gradcheck(seeded(function(l, s) return make(l, s):rsample({ 3 }) end), { loc, scale }), name)
    end
    assert.is_true(gradcheck(seeded(function(r) return D.Exponential(r):rsample({ 3 }) end), { scale }))
    local A = leaf({ { 1.2, 0 }, { 0.4, 0.8 } })
    assert.is_true(gradcheck(seeded(function(l, L)
      return D.MultivariateNormal(l, { scale_tril = L:tril() }):rsample({ 3 })
    end), { loc, A }))
    assert.is_true(gradcheck(seeded(function(l, S)
      return D.MultivariateNormal(l, { covariance_matrix = S:matmul(S:mT()) + tide.eye(2, "float64") }):rsample({ 2 })
    end), { loc, A }))
  end)

  it("flow through log_prob, entropy and kl_divergence into the parameters", function()
    local a, b = leaf({ 0.7, 2.5 }), leaf({ 1.5, 0.4 })
    local x = f64({ 0.3, 1.7 })
    local unit = f64({ 0.3, 0.8 })
    local cases = {
      Exponential = function(p) return D.Exponential(p):log_prob(x) + D.Exponential(p):entropy() end,
      Gamma = function(p, q) return D.Gamma(p, q):log_prob(x) + D.Gamma(p, q):entropy() end,
      Beta = function(p, q) return D.Beta(p, q):log_prob(unit) + D.Beta(p, q):entropy() end,
      StudentT = function(p, q) return D.StudentT(p, 0.5, q):log_prob(x) + D.StudentT(p, 0.5, q):entropy() end,
      Laplace = function(p, q) return D.Laplace(p, q):log_prob(x) end,
      Gumbel = function(p, q) return D.Gumbel(p, q):log_prob(x) end,
      Poisson = function(p) return D.Poisson(p):log_prob(f64({ 0, 3 })) end,
      Binomial = function(p) return D.Binomial({ total_count = 6, logits = p }):log_prob(f64({ 2, 6 })) end,
      Geometric = function(_, q) return D.Geometric({ probs = q / 2 }):log_prob(f64({ 0, 4 })) end,
      Dirichlet = function(p, q)
        return D.Dirichlet(tide.stack({ p, q }, 2)):log_prob(f64({ { 0.4, 0.6 }, { 0.1, 0.9 } }))
      end,
      KLGamma = function(p, q) return D.kl_divergence(D.Gamma(p, q), D.Gamma(q, p)) end,
      KLBeta = function(p, q) return D.kl_divergence(D.Beta(p, q), D.Beta(q, 2)) end,
    }
    for name, f in pairs(cases) do assert.is_true(gradcheck(f, { a, b }), name) end
  end)

  it("rsample is refused where there is none, and sample draws without gradient", function()
    assert.has_error(function() D.Poisson(2):rsample() end, "Poisson.rsample: not implemented")
    assert.is_false(D.Gamma(leaf(2), 1):sample().requires_grad)
    assert.is_true(D.Gamma(leaf(2), 1):rsample().requires_grad)
  end)
end)

describe("distributions: kl_divergence", function()
  it("matches the closed forms", function()
    local pe, qe = D.Exponential(f64(2)), D.Exponential(f64(0.5))
    H.close(D.kl_divergence(pe, qe), math.log(4) + 0.25 - 1, 1e-14)
    H.close(D.kl_divergence(D.Laplace(f64(0), f64(1)), D.Laplace(f64(1), f64(2))),
      -math.log(0.5) + 0.5 + 0.5 * math.exp(-1) - 1, 1e-14)
    H.close(D.kl_divergence(D.Poisson(f64(2)), D.Poisson(f64(3))), 2 * math.log(2 / 3) + 1, 1e-14)
    H.close(D.kl_divergence(D.Poisson(f64(0)), D.Poisson(f64(3))), 3, 1e-15)
    -- Gamma(3, 2) || Gamma(2, 1)
    H.close(D.kl_divergence(D.Gamma(f64(3), f64(2)), D.Gamma(f64(2), f64(1))),
      2 * math.log(2) + lgamma(2) - lgamma(3) + digamma(3) + (1 - 2) * 1.5, 1e-14)
    -- Beta(2, 3) || Beta(1, 1): -entropy of Beta(2, 3)
    H.close(D.kl_divergence(D.Beta(f64(2), f64(3)), D.Beta(f64(1), f64(1))), -D.Beta(f64(2), f64(3)):entropy(), 1e-14)
    H.close(D.kl_divergence(D.Dirichlet(f64({ 2, 3 })), D.Dirichlet(f64({ 1, 1 }))), -D.Beta(f64(2), f64(3)):entropy(),
      1e-14)
    H.close(D.kl_divergence(D.Uniform(f64(0), f64(1)), D.Uniform(f64(-1), f64(3))), math.log(4), 1e-15)
    H.close(D.kl_divergence(D.Uniform(f64(0), f64(2)), D.Uniform(f64(0), f64(1))), math.huge, 0)
    H.close(D.kl_divergence(D.Cauchy(f64(0), f64(1)), D.Cauchy(f64(0), f64(1))), 0, 0, 1e-15)
    H.close(D.kl_divergence(D.Bernoulli({ probs = f64({ 0.25, 0, 1 }) }), D.Bernoulli({ probs = f64(0.5) })),
      { 0.25 * math.log(0.5) + 0.75 * math.log(1.5), math.log(2), math.log(2) }, 1e-14)
    local S1, S2 = f64({ { 2, 0.6 }, { 0.6, 1 } }), f64({ { 1, 0 }, { 0, 4 } })
    local m1, m2 = f64({ 1, -1 }), f64({ 0, 1 })
    -- (tr(S2^-1 S1) + (m2 - m1)' S2^-1 (m2 - m1) - n + log(det S2 / det S1)) / 2
    local want = 0.5 * ((2 + 0.25) + (1 + 4 / 4) - 2 + math.log(4 / 1.64))
    H.close(D.kl_divergence(D.MultivariateNormal(m1, { covariance_matrix = S1 }),
      D.MultivariateNormal(m2, { covariance_matrix = S2 })), want, 1e-14)
    H.close(D.kl_divergence(D.Independent(D.Normal(f64({ 0, 1 }), 1), 1), D.Independent(D.Normal(f64({ 1, 1 }), 1), 1)),
      0.5, 1e-15)
  end)

  it("agrees with the Monte Carlo mean of log p - log q, and is 0 between equals", function()
    tide.manual_seed(31)
    local pairs_ = {
      { D.Gumbel(f64(0), f64(1)), D.Gumbel(f64(0.5), f64(2)) },
      { D.Geometric({ probs = f64(0.3) }), D.Geometric({ probs = f64(0.6) }) },
      { D.Binomial({ total_count = 8, probs = f64(0.3) }), D.Binomial({ total_count = 8, probs = f64(0.6) }) },
      { D.OneHotCategorical({ probs = f64({ 0.2, 0.8 }) }), D.OneHotCategorical({ probs = f64({ 0.5, 0.5 }) }) },
      { D.LogNormal(f64(0), f64(1)), D.LogNormal(f64(1), f64(0.5)) },
      { D.Chi2(f64(3)), D.Gamma(f64(2), f64(1)) },
      { D.Dirichlet(f64({ 2, 1, 3 })), D.Dirichlet(f64({ 1, 1, 1 })) },
    }
    for _, pq in ipairs(pairs_) do
      local p, q = pq[1], pq[2]
      local x = p:sample({ 20000 })
      local lr = p:log_prob(x) - q:log_prob(x)
      local m, _, se = moments(lr)
      local kl = D.kl_divergence(p, q):item()
      assert.is_true(math.abs(kl - m) <= 4.5 * se,
        ("%s: %.5g, Monte Carlo %.5g (se %.2g)"):format(tostring(p), kl, m, se))
      H.close(D.kl_divergence(p, p), 0, 0, 1e-14)
    end
  end)

  it("names the pairs it does not have", function()
    assert.has_error(function() D.kl_divergence(D.Gamma(1, 1), D.Exponential(1)) end,
      "kl_divergence: not implemented for Gamma and Exponential")
    assert.has_error(function() D.kl_divergence(D.Poisson(1), D.Normal(0, 1)) end,
      "kl_divergence: not implemented for Poisson and Normal")
    assert.has_error(function()
      D.kl_divergence(D.Binomial({ total_count = 3, probs = 0.5 }), D.Binomial({ total_count = 4, probs = 0.5 }))
    end, "kl_divergence: Binomial pairs need one total_count, given as a number to both")
  end)
end)

describe("distributions: arguments", function()
  it("checks parameters given as numbers", function()
    assert.has_error(function() D.Exponential(-1) end, "Exponential: rate must be positive, got -1")
    assert.has_error(function() D.Laplace(0, 0) end, "Laplace: scale must be positive, got 0")
    assert.has_error(function() D.Gamma(0 / 0, 1) end, "Gamma: concentration must be positive, got nan")
    assert.has_error(function() D.Normal(0 / 0, 1) end, "Normal: loc must be a number (not NaN), got nan")
    assert.has_error(function() D.Beta(1, -2) end, "Beta: concentration0 must be positive, got -2")
    assert.has_error(function() D.Poisson(-0.5) end, "Poisson: rate must be non-negative, got -0.5")
    assert.has_error(function() D.Geometric({ probs = 0 }) end, "Geometric: probs must be in (0, 1], got 0")
    assert.has_error(function() D.Bernoulli({ probs = 1.5 }) end, "Bernoulli: probs must be in [0, 1], got 1.5")
    assert.has_error(function() D.Binomial({ total_count = 2.5, probs = 0.5 }) end,
      "Binomial: total_count must be a non-negative integer, got 2.5")
    assert.has_error(function() D.Uniform(2, 1) end, "Uniform: low must be below high, got 2 and 1")
    assert.has_error(function() D.StudentT(3, 0, -1) end, "StudentT: scale must be positive, got -1")
    assert.has_error(function() D.Exponential(1, 2) end,
      "Exponential: the options must be a table such as { validate_args = true }, got number")
  end)

  it("checks tensors and values with validate_args, and not otherwise", function()
    local bad = tide.tensor({ 1, -1 })
    assert.has_error(function() D.Exponential(bad, { validate_args = true }) end,
      "Exponential: rate must be positive (validate_args found an element that is not)")
    assert.has_no.errors(function() D.Exponential(bad) end)
    local e = D.Exponential(tide.tensor({ 1, 2 }), { validate_args = true })
    assert.has_error(function() e:log_prob(tide.tensor({ 1, -2 })) end,
      "Exponential.log_prob: value must be non-negative (validate_args found an element that is not)")
    assert.has_error(function() D.Poisson(2, { validate_args = true }):log_prob(tide.tensor({ 1.5 })) end,
      "Poisson.log_prob: value must be a non-negative integer (validate_args found an element that is not)")
    assert.has_error(function()
      D.Dirichlet(tide.ones(3), { validate_args = true }):log_prob(tide.tensor({ 0.5, 0.4, 0.2 }))
    end,
      "Dirichlet.log_prob: value must sum to 1 over its last dim (validate_args found an element that is not)")
    assert.has_error(function()
      D.MultivariateNormal(tide.zeros(2), { scale_tril = tide.tensor({ { 1, 1 }, { 0, 1 } }), validate_args = true })
    end, "MultivariateNormal: scale_tril must be lower triangular (validate_args found an element that is not)")
    D.set_default_validate_args(true)
    local ok, err = pcall(D.Gamma, tide.tensor({ 0 }), 1)
    D.set_default_validate_args(false)
    assert.is_false(ok)
    assert.matches("Gamma: concentration must be positive", err, 1, true)
    assert.has_error(function() D.set_default_validate_args(1) end,
      "set_default_validate_args: expects a boolean, got number")
  end)

  it("names the bad shapes and options", function()
    assert.has_error(function() D.MultivariateNormal(tide.zeros(3), { covariance_matrix = tide.eye(2) }) end,
      "MultivariateNormal: loc has 3 elements in its last dim, but the matrix is 2 x 2")
    assert.has_error(function() D.MultivariateNormal(tide.zeros(2), {}) end,
      "MultivariateNormal: give exactly one of covariance_matrix, precision_matrix and scale_tril")
    assert.has_error(function() D.MultivariateNormal(tide.zeros(2), tide.eye(2)) end,
      "MultivariateNormal: expects a table { covariance_matrix = ... }, { precision_matrix = ... } or "
      .. "{ scale_tril = ... }")
    assert.has_error(function() D.Dirichlet(tide.tensor(1)) end,
      "Dirichlet: concentration must have at least 1 dimension")
    assert.has_error(function() D.Independent(D.Normal(tide.zeros(2), 1), 2) end,
      "Independent: reinterpreted_batch_ndims must be an integer in [0, 1], got 2")
    assert.has_error(function() D.Independent({}, 0) end, "Independent: argument 1 must be a distribution")
    assert.has_error(function() D.Gamma(1, 1):sample({ 2.5 }) end,
      "Gamma.sample: sample_shape must hold non-negative integers, got 2.5")
    assert.has_error(function() D.Binomial({ total_count = tide.tensor({ 2, 3 }), probs = 0.5 }):entropy() end,
      "Binomial.entropy: needs total_count given as a number (it sums over 0..n)")
    assert.has_error(function() D.Exponential(1):log_prob("x") end,
      "Exponential.log_prob: value must be a tensor or a number, got string")
  end)
end)
