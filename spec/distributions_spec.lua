-- distributions_spec: tide.distributions against hand-computed densities,
-- entropies and KL divergences, the statistics of seeded draws, the gradients
-- of reparameterised draws and log-densities, shapes and the errors.
local tide = require "tide"
local H = require "spec.helpers"
local D = tide.distributions

local LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)

-- mean and variance of a tensor's elements, in Lua
local function stats(t)
  local v = H.flat(t:double():totable())
  local m, s = 0, 0
  for _, x in ipairs(v) do m = m + x end
  m = m / #v
  for _, x in ipairs(v) do s = s + (x - m) ^ 2 end
  return m, s / (#v - 1)
end

describe("distributions", function()
  it("Normal: log_prob, entropy, cdf, icdf, moments and draws", function()
    local n = D.Normal(tide.tensor({ 0, 1 }, "float64"), 2)
    H.close(n:log_prob(tide.tensor({ 0.5, 1 }, "float64")),
      { -0.5 * 0.25 ^ 2 - math.log(2) - LOG_SQRT_2PI, -math.log(2) - LOG_SQRT_2PI }, 1e-14)
    H.close(n:entropy(), { math.log(2) + 0.5 + LOG_SQRT_2PI, math.log(2) + 0.5 + LOG_SQRT_2PI }, 1e-14)
    H.close(n:cdf(tide.tensor({ 0, 3 }, "float64")), { 0.5, 0.8413447460685429 }, 1e-14)
    H.close(n:icdf(tide.tensor({ 0.5, 0.8413447460685429 }, "float64")), { 0, 3 }, 1e-12)
    H.close(n:variance(), { 4, 4 }, 0)
    assert.are.equal("Normal(loc: [2], scale: [2])", tostring(n))
    tide.manual_seed(3)
    local x = D.Normal(1.5, 0.5):sample({ 20000 })
    assert.are.same({ 20000 }, x:shape())
    local m, v = stats(x)
    assert.is_true(math.abs(m - 1.5) < 0.02 and math.abs(v - 0.25) < 0.01, ("mean %g var %g"):format(m, v))
    assert.are.same({ 3, 2 }, n:sample({ 3 }):shape())
    assert.is_false(n:sample().requires_grad)
  end)

  it("Normal: rsample and log_prob carry gradients to loc and scale", function()
    local loc = tide.tensor({ 0.5, -1 }, "float64"):requires_grad_()
    local scale = tide.tensor({ 1.5, 0.3 }, "float64"):requires_grad_()
    tide.manual_seed(9)
    local z = D.Normal(loc, scale):rsample({ 4 })
    z:sum():backward()
    H.close(loc.grad, { 4, 4 }, 1e-15)   -- dz/dloc = 1 for each draw
    local x = tide.tensor({ 0.2, 0.7 }, "float64")
    assert.is_true(tide.autograd.gradcheck(function(l, s) return D.Normal(l, s):log_prob(x) end, { loc, scale }))
    assert.is_true(tide.autograd.gradcheck(function(l, s)
      return D.kl_divergence(D.Normal(l, s), D.Normal(0.1, 2))
    end, { loc, scale }))
  end)

  it("Uniform: density inside and outside, moments and draws", function()
    local u = D.Uniform(tide.tensor({ 0, -1 }), tide.tensor({ 1, 3 }))
    H.close(u:log_prob(tide.tensor({ 0.5, 3 })), { 0, -math.huge }, 1e-7)
    H.close(u:log_prob(tide.tensor({ -0.1, -1 })), { -math.huge, -math.log(4) }, 1e-7)
    H.close(u:entropy(), { 0, math.log(4) }, 1e-7)
    H.close(u:mean(), { 0.5, 1 }, 0)
    H.close(u:variance(), { 1 / 12, 16 / 12 }, 1e-7)
    tide.manual_seed(4)
    local x = D.Uniform(2, 5):sample({ 10000 })
    local m, var = stats(x)
    assert.is_true(math.abs(m - 3.5) < 0.05 and math.abs(var - 0.75) < 0.03, ("mean %g var %g"):format(m, var))
    assert.is_true(x:ge(2):all():item() and x:lt(5):all():item())
  end)

  it("Bernoulli from probs or logits", function()
    local b = D.Bernoulli({ probs = tide.tensor({ 0.2, 0.9 }, "float64") })
    H.close(b:log_prob(tide.tensor({ 1, 0 }, "float64")), { math.log(0.2), math.log(0.1) }, 1e-14)
    H.close(b:entropy(), { -(0.2 * math.log(0.2) + 0.8 * math.log(0.8)), -(0.9 * math.log(0.9) + 0.1 * math.log(0.1)) },
      1e-14)
    local bl = D.Bernoulli({ logits = tide.tensor({ 0, 100, -100 }, "float64") })
    H.close(bl.probs, { 0.5, 1, 0 }, 1e-15)
    H.close(bl:log_prob(tide.tensor({ 1, 1, 1 }, "float64")), { -math.log(2), 0, -100 }, 1e-14)   -- no overflow
    tide.manual_seed(5)
    local draws = D.Bernoulli({ probs = 0.3 }):sample({ 20000 })
    local m = stats(draws)
    assert.is_true(math.abs(m - 0.3) < 0.015, tostring(m))
  end)

  it("Categorical: normalised probs, log_prob, entropy, KL and Gumbel-max draws", function()
    local c = D.Categorical({ logits = tide.tensor({ { 0, 1, 2 }, { 2, 0, -1 } }, "float64") })
    local function lse(a, b, d) return math.log(math.exp(a) + math.exp(b) + math.exp(d)) end
    H.close(c:log_prob(tide.tensor({ 1, 3 }, "int64")), { -lse(0, 1, 2), -1 - lse(2, 0, -1) }, 1e-14)
    H.close(c.probs:sum(-1), { 1, 1 }, 1e-15)
    local p = D.Categorical({ probs = tide.tensor({ 2, 0, 6 }, "float64") })
    H.close(p.probs, { 0.25, 0, 0.75 }, 1e-15)
    H.close(p:entropy(), -(0.25 * math.log(0.25) + 0.75 * math.log(0.75)), 1e-14)   -- 0 log 0 = 0
    local q = D.Categorical({ probs = tide.tensor({ 1, 1, 2 }, "float64") })
    H.close(D.kl_divergence(p, q), 0.25 * math.log(0.25 / 0.25) + 0.75 * math.log(0.75 / 0.5), 1e-14)
    tide.manual_seed(6)
    local s = p:sample({ 20000 })
    assert.are.equal("int64", s:dtype())
    local counts = { 0, 0, 0 }
    for _, k in ipairs(s:totable()) do counts[k] = counts[k] + 1 end
    assert.are.equal(0, counts[2])
    assert.is_true(math.abs(counts[1] / 20000 - 0.25) < 0.015, tostring(counts[1]))
    assert.are.same({ 5, 2 }, c:sample({ 5 }):shape())
    assert.are.same({ 2 }, c:entropy():shape())
  end)

  it("rejects bad parameters", function()
    assert.has_error(function() D.Normal("a", 1) end, "Normal: loc must be a tensor or a number, got string")
    assert.has_error(function() D.Normal(tide.tensor({ 1 }, "int64"), 1) end,
      "Normal: loc must be a floating-point tensor, got int64")
    assert.has_error(function() D.Bernoulli({}) end, "Bernoulli: give exactly one of probs and logits")
    assert.has_error(function() D.Categorical({ probs = tide.tensor({ 1 }), logits = tide.tensor({ 0 }) }) end,
      "Categorical: give exactly one of probs and logits")
    assert.has_error(function() D.Categorical({ probs = 0.5 }) end, "Categorical: probs must have at least 1 dimension")
    assert.has_error(function() D.Normal(0, 1):sample({ -1 }) end,
      "Normal.rsample: sample_shape must hold non-negative integers, got -1")
    assert.has_error(function() D.kl_divergence(D.Normal(0, 1), D.Uniform(0, 1)) end,
      "kl_divergence: not implemented for Normal and Uniform")
  end)
end)
