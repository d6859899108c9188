--- tide.special: torch.special's functions under its names. The gamma family
-- (gammaln, digamma/psi, polygamma), the Bessel functions i0, i0e, i1, i1e and
-- erf, erfc, erfinv are runtime ops, logit and sinc compose.lua's; the rest
-- compose ops here, each in a form that stays accurate in the tails and finite
-- in value and gradient where the branch it does not take would not be (every
-- where() gets inputs its unused side can take). Integer tensors compute in
-- float32.
--
--     local S = tide.special
--     local lp = S.log_ndtr(x)            -- log Phi(x), to x = -1e150 and beyond
--     local z = S.ndtri(p)                -- the standard normal quantile
local tide = require "tide"
local B = require "bindings.ffi"
local T = require "tide.tensor"
local fail = B.fail
local is_tensor = tide.is_tensor
local fmt = string.format

local M = {}
local SQRT1_2, LOG_2PI = math.sqrt(0.5), math.log(2 * math.pi)

-- x as a floating-point tensor (integers and bool in float32), or an error naming the function.
local function floating(x, name, pos)
  if not is_tensor(x) then
    fail(fmt("special.%s: argument %d must be a tensor, got %s", name, pos or 1, type(x)))
  end
  return x:is_floating_point() and x or x:float()
end

-- the runtime's ops and compose.lua's functions, under torch.special's names
M.gammaln = tide.lgamma
M.digamma = tide.digamma
M.psi = tide.digamma
M.polygamma = tide.polygamma
M.i0, M.i0e, M.i1, M.i1e = tide.i0, tide.i0e, tide.i1, tide.i1e
M.erf, M.erfc, M.erfinv = tide.erf, tide.erfc, tide.erfinv
M.expit = tide.sigmoid
M.exp2, M.expm1, M.log1p, M.round = tide.exp2, tide.expm1, tide.log1p, tide.round
M.xlogy = tide.xlogy
M.logit, M.sinc = tide.logit, tide.sinc   -- compose.lua's

--- xlog1py(x, y): x * log1p(y), 0 where x is 0 (whatever y but NaN), NaN where y is NaN;
-- either may be a number, as in tide.xlogy.
function M.xlog1py(x, y)
  if not is_tensor(x) and not is_tensor(y) then fail("special.xlog1py: at least one argument must be a tensor") end
  for i, v in ipairs { x, y } do
    if not is_tensor(v) and type(v) ~= "number" then
      fail(fmt("special.xlog1py: argument %d must be a tensor or a number, got %s", i, type(v)))
    end
  end
  x, y = is_tensor(x) and x or T.scalar(x), is_tensor(y) and y or T.scalar(y)
  local zero = x:eq(0)
  local r = tide.where(zero, 0, x * tide.where(zero, 0, y):log1p())
  if y:is_floating_point() then r = tide.where(y:ne(y), y, r) end
  return r
end

--- ndtr(x): the standard normal CDF, erfc(-x / sqrt 2) / 2 (relative accuracy in the lower tail).
function M.ndtr(x)
  x = floating(x, "ndtr")
  return (x * -SQRT1_2):erfc() * 0.5
end

-- sum_k (-1)^k (2k-1)!! z^k for k = 1..12: log Phi(x) = -x^2/2 - log(-x) - log(2 pi)/2
-- + log1p of it at z = 1/x^2, for x below -20 (float64: within 2e-20 there) or -10
-- (float32 and below, whose erfc underflows near -13: within 3e-13).
local ASYM = { -1, 3, -15, 105, -945, 10395, -135135, 2027025, -34459425, 654729075, -13749310575,
               316234143225 }

--- log_ndtr(x): log of the standard normal CDF, accurate in both tails: log1p(-erfc(x/sqrt2)/2)
-- above -1, log(erfc(-x/sqrt2)/2) down to where erfc nears underflow, the asymptotic series below.
function M.log_ndtr(x)
  x = floating(x, "log_ndtr")
  local lim = x:dtype() == "float64" and -20 or -10
  local hi = x:clamp(-1, nil)
  local upper = (hi * SQRT1_2):erfc():mul(-0.5):log1p()
  local mid = x:clamp(lim, -1)
  local middle = (mid * -SQRT1_2):erfc():mul(0.5):log()
  local lo = x:clamp(nil, lim)
  local z = (lo * lo):reciprocal()
  local w = z * ASYM[#ASYM]
  for k = #ASYM - 1, 1, -1 do w = (w + ASYM[k]) * z end
  local lower = (lo * lo):mul(-0.5):sub((-lo):log()):sub(0.5 * LOG_2PI):add(w:log1p())
  return tide.where(x:gt(-1), upper, tide.where(x:ge(lim), middle, lower))
end

--- ndtri(p): the standard normal quantile, the x with ndtr(x) = p, about q = min(p, 1 - p)
-- (exact for p >= 1/2): sqrt 2 erfinv(2q - 1) for q >= 1/4, where 2q - 1 is exact; below, from
-- that (or, in the far tail, -sqrt(-2 log q - log(-2 log q) - log 2pi)) by four Newton steps on
-- log_ndtr, so that tiny tails keep their relative accuracy. 0 and 1 give -inf and inf;
-- outside [0, 1], NaN.
function M.ndtri(p)
  p = floating(p, "ndtri")
  local upper = p:gt(0.5)
  local q = tide.where(upper, 1 - p, p)
  local ok = q:gt(0):logical_and(q:le(0.5))
  q = tide.where(ok, q, 0.25)   -- what the steps can take; the others are set at the end
  local logq = q:log()
  local far = p:dtype() == "float64" and 1e-10 or 1e-4
  local l2 = logq * -2
  local start_far = (l2 - l2:log() - LOG_2PI):clamp(0, nil):sqrt():neg()
  local start = (q * 2 - 1):erfinv() * math.sqrt(2)
  local x = tide.where(q:lt(far), start_far, start)
  for _ = 1, 4 do
    local lphi = M.log_ndtr(x)
    local lpdf = (x * x):mul(-0.5):sub(0.5 * LOG_2PI)
    x = x - (lphi - logq) * (lphi - lpdf):exp()
  end
  x = tide.where(q:ge(0.25), start, x)
  x = tide.where(upper, -x, x)
  x = tide.where(p:eq(0), -math.huge, tide.where(p:eq(1), math.huge, x))
  local bad = p:lt(0):logical_or(p:gt(1)):logical_or(p:ne(p))
  return tide.where(bad, 0 / 0, x)
end

--- entr(x): -x log x for x > 0, 0 at 0, -inf below, NaN for NaN.
function M.entr(x)
  x = floating(x, "entr")
  local pos = x:gt(0)
  local xs = tide.where(pos, x, 1)
  local r = tide.where(pos, -(xs * xs:log()), tide.where(x:eq(0), 0, -math.huge))
  return tide.where(x:ne(x), x, r)
end

--- multigammaln(a, p): log of the multivariate gamma function of dimension p,
-- p (p - 1) / 4 log pi + sum_{i < p} lgamma(a - i / 2). As torch, every element
-- of a must exceed (p - 1) / 2: checked, which reads a back to the host.
function M.multigammaln(a, p)
  a = floating(a, "multigammaln")
  if type(p) ~= "number" or p ~= math.floor(p) or p < 1 then
    fail(fmt("special.multigammaln: p must be a positive integer, got %s", tostring(p)))
  end
  if not a:gt((p - 1) / 2):all():item() then
    fail(fmt("special.multigammaln: all elements must be greater than (p-1)/2 = %g", (p - 1) / 2))
  end
  local r = a:lgamma()
  for i = 1, p - 1 do r = r + (a - i / 2):lgamma() end
  return r + p * (p - 1) / 4 * math.log(math.pi)
end

--- softmax(x, dim, dtype), log_softmax(x, dim, dtype): tide.softmax and tide.log_softmax,
-- in dtype when given.
function M.softmax(x, dim, dtype) return tide.softmax(floating(x, "softmax"), dim, dtype) end
function M.log_softmax(x, dim, dtype) return tide.log_softmax(floating(x, "log_softmax"), dim, dtype) end

--- logsumexp(x, dim, keepdim): tide.logsumexp.
function M.logsumexp(x, dim, keepdim) return tide.logsumexp(floating(x, "logsumexp"), dim, keepdim) end

return M
