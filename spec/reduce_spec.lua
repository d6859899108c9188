-- reduce_spec: the reductions (sum, mean, prod, amax, amin, max/min with a dim,
-- argmax, argmin, var, std, logsumexp, all, any) and the ops along one dim
-- (cumsum, softmax, log_softmax), against hand-computed values and a float64
-- reference in plain Lua, over dims, keepdim, layouts, dtypes, empty and 0-d inputs.
local tide = require "tide"
local H = require "spec.helpers"

local DTYPES = { "float32", "float64", "int32", "int64", "uint8", "bool", "float16", "bfloat16" }
local FLOATS = { float32 = true, float64 = true, float16 = true, bfloat16 = true }
local function sync(f) return function() return tide.debug.sync(f) end end

-- -- a float64 reference over flat row-major tables ---------------------------------------

local function numel(shape)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  return n
end

-- Groups the values of a tensor of `shape` by output element of a reduction
-- over `dims` (1-based, negative from the end; nil: all), in row-major order.
local function groups_of(vals, shape, dims, keepdim)
  local nd, red = #shape, {}
  if dims == nil then
    for d = 1, nd do red[d] = true end
  else
    if type(dims) == "number" then dims = { dims } end
    for _, d in ipairs(dims) do red[d < 0 and d + nd + 1 or d] = true end
  end
  local oshape, nout = {}, 1
  for d = 1, nd do
    if not red[d] then oshape[#oshape + 1] = shape[d]; nout = nout * shape[d]
    elseif keepdim then oshape[#oshape + 1] = 1 end
  end
  local groups = {}
  for o = 1, nout do groups[o] = {} end
  for i = 0, numel(shape) - 1 do
    local rest, o, mul = i, 0, 1
    for d = nd, 1, -1 do
      local c = rest % shape[d]
      rest = math.floor(rest / shape[d])
      if not red[d] then o = o + c * mul; mul = mul * shape[d] end
    end
    local g = groups[o + 1]
    g[#g + 1] = vals[i + 1]
  end
  return groups, oshape
end

local function ref_reduce(x, dims, keepdim, fold)
  local groups, oshape = groups_of(H.flat(x:totable()), x:shape(), dims, keepdim)
  local out = {}
  for o = 1, #groups do out[o] = fold(groups[o]) end
  return H.nest(out, oshape), oshape
end

local function isnan(v) return v ~= v end
local F = {}
function F.sum(g) local s = 0; for _, v in ipairs(g) do s = s + v end; return s end
function F.prod(g) local s = 1; for _, v in ipairs(g) do s = s * v end; return s end
function F.mean(g) return F.sum(g) / #g end
function F.amax(g)
  local m = g[1]
  for _, v in ipairs(g) do if isnan(v) then return v end; if v > m then m = v end end
  return m
end
function F.amin(g)
  local m = g[1]
  for _, v in ipairs(g) do if isnan(v) then return v end; if v < m then m = v end end
  return m
end
local function var_c(corr)
  return function(g)
    local m, ss = F.mean(g), 0
    for _, v in ipairs(g) do ss = ss + (v - m) ^ 2 end
    return ss / math.max(0, #g - corr)
  end
end
F.var = var_c(1)
function F.std(g) return math.sqrt(F.var(g)) end
function F.logsumexp(g)
  if #g == 0 then return -math.huge end
  local m = F.amax(g)
  if m == math.huge or m == -math.huge then m = 0 end
  local s = 0
  for _, v in ipairs(g) do s = s + math.exp(v - m) end
  return math.log(s) + m
end
function F.all(g) for _, v in ipairs(g) do if v == 0 then return 0 end end; return 1 end
function F.any(g) for _, v in ipairs(g) do if v ~= 0 then return 1 end end; return 0 end
local function first_index(g, m)
  for i, v in ipairs(g) do if v == m or (isnan(m) and isnan(v)) then return i end end
end
function F.argmax(g) return first_index(g, F.amax(g)) end
function F.argmin(g) return first_index(g, F.amin(g)) end

-- Test data of a dtype: values that keep products and float16 sums exact enough.
local function data(shape, dtype, op, seed)
  local n, v = numel(shape), nil
  if dtype == "bool" then
    v = H.values(n, 0, 1.6, seed)
    for i = 1, n do v[i] = v[i] >= 0.5 end
  elseif op == "prod" or op == "cumprod" then
    v = H.values(n, FLOATS[dtype] and 0.6 or -2, FLOATS[dtype] and 1.4 or 3, seed)
    if not FLOATS[dtype] then for i = 1, n do v[i] = math.floor(v[i]) end end
    if dtype == "uint8" then for i = 1, n do v[i] = math.abs(v[i]) end end
  elseif FLOATS[dtype] then
    v = H.values(n, -4, 4, seed)
  else
    v = H.values(n, dtype == "uint8" and 0 or -9, 10, seed)
    for i = 1, n do v[i] = math.floor(v[i]) end
  end
  return tide.tensor(H.nest(v, shape), dtype)
end

-- The layouts of the helper and an expanded (stride-0) one of the same values.
local function layouts(x)
  local r = H.layouts(x)
  if x:dim() == 3 then
    local s = x:shape()
    r.expanded = x:narrow(2, 1, 1):clone():expand(s[1], s[2], s[3])
  end
  return r
end

local function result_dtype(op, dtype)
  if op == "all" or op == "any" then return "bool" end
  if op == "sum" or op == "prod" then return FLOATS[dtype] and dtype or "int64" end
  if op == "amax" or op == "amin" then return dtype end
  return FLOATS[dtype] and dtype or "float32"
end

local function tol(dtype)
  if dtype == "float16" or dtype == "bfloat16" then return 2e-2, 2e-2 end
  if dtype == "float32" then return 2e-6, 1e-5 end
  return 1e-12, 1e-12
end

-- -- reductions --------------------------------------------------------------------------

describe("reductions", function()
  local x = tide.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })

  it("compute hand-computed values", function()
    H.equal(x:sum(), 21)
    H.equal(x:sum(1), { 5, 7, 9 })
    H.equal(x:sum(2), { 6, 15 })
    H.equal(x:sum(-1, true), { { 6 }, { 15 } })
    H.equal(x:sum({ 1, 2 }, true), { { 21 } })
    H.equal(x:mean(), 3.5)
    H.equal(x:mean(1), { 2.5, 3.5, 4.5 })
    H.equal(x:prod(2), { 6, 120 })
    H.equal(x:amax(), 6)
    H.equal(x:amin(1), { 1, 2, 3 })
    H.equal(x:max(), 6)
    H.equal(x:min(), 1)
    H.close(x:var(), 3.5)
    H.close(x:var(2), { 1, 1 })
    H.close(x:var(2, false, 0), { 2 / 3, 2 / 3 })
    H.close(x:std(1), { math.sqrt(4.5), math.sqrt(4.5), math.sqrt(4.5) })
    H.close(x:logsumexp(2), { 3 + math.log(1 + math.exp(-1) + math.exp(-2)), 6 + math.log(1 + math.exp(-1) + math.exp(-2)) })
    H.equal(tide.tensor({ { true, false }, { true, true } }):all(1), { true, false })
    H.equal(tide.tensor({ { true, false }, { false, false } }):any(2), { true, false })
    H.equal(tide.tensor({ 0.5, 2, -1 }):all(), 1)  -- 0-d bool compares as 1
    H.equal(tide.tensor({ 0, 0, 3 }, "int32"):any(), 1)
  end)

  it("give the dtypes of PyTorch", function()
    assert.equal("int64", tide.tensor({ 1, 2 }, "int32"):sum():dtype())
    assert.equal("int64", tide.tensor({ true, true }):sum():dtype())
    assert.equal(2, tide.tensor({ true, true }):sum():item())
    assert.equal("int64", tide.tensor({ 1, 2 }, "uint8"):prod():dtype())
    assert.equal("float64", tide.tensor({ 1, 2 }, "int32"):sum(nil, false, "float64"):dtype())
    assert.equal("float16", tide.tensor({ 1, 2 }, "float16"):sum():dtype())
    assert.equal("float32", tide.tensor({ 1, 2 }, "int64"):mean():dtype())
    assert.equal("uint8", tide.tensor({ 1, 2 }, "uint8"):amax():dtype())
    assert.equal("bool", tide.tensor({ 1, 2 }):all():dtype())
    H.equal(tide.tensor({ 200, 100 }, "uint8"):sum(), 300)   -- int64, no wrap at 256
    H.equal(tide.tensor({ 2 ^ 31 - 1, 1 }, "int32"):sum(), 2 ^ 31)
  end)

  for _, op in ipairs { "sum", "mean", "prod", "amax", "amin", "var", "std", "logsumexp", "all", "any" } do
    it(op .. " matches a float64 reference over dims, keepdim, layouts and dtypes", function()
      local dimsets = { false, 1, 2, 3, -1, { 1, 3 }, { 3, 1 }, { 2, 3 }, { -1, -3 }, { 1, 2, 3 } }
      for _, dtype in ipairs(DTYPES) do
        local x0 = data({ 3, 4, 5 }, dtype, op, #op)
        local rtol, atol = tol(result_dtype(op, dtype))
        for lname, xl in pairs(layouts(x0)) do
          for _, dims in ipairs(dimsets) do
            for _, keep in ipairs { false, true } do
              local d = dims or nil
              local got = xl[op](xl, d, keep)
              local msg = string.format("%s %s %s dims=%s keepdim=%s", op, dtype, lname,
                type(d) == "table" and table.concat(d, ",") or tostring(d), tostring(keep))
              assert.equal(result_dtype(op, dtype), got:dtype(), msg)
              H.close(got, (ref_reduce(xl, d, keep, F[op])), rtol, atol, msg)
            end
          end
        end
      end
    end)
  end

  it("var and std take a correction and give nan or inf where n <= correction", function()
    local v = tide.tensor({ 1, 2, 3, 4 }, "float64")
    H.close(v:var(nil, false, 0), 1.25, 1e-15)
    H.close(v:var(1, false, 2), 2.5, 1e-15)
    H.close(v:std(1, false, 0), math.sqrt(1.25), 1e-15)
    H.equal(v:var(nil, false, 4), math.huge)                    -- 5 / 0
    H.equal(tide.tensor({ 3 }):var(), 0 / 0)                     -- 0 / 0
    H.equal(tide.tensor({ 3 }):std(), 0 / 0)
    H.equal(tide.tensor({ 3 }):var(nil, false, 0), 0)
  end)

  it("logsumexp is stable for large values and handles infinities", function()
    H.close(tide.tensor({ 1000, 1000 }):logsumexp(), 1000 + math.log(2))
    H.close(tide.tensor({ -1000, -1000 }, "float64"):logsumexp(), -1000 + math.log(2), 1e-15)
    H.equal(tide.tensor({ -math.huge, -math.huge }):logsumexp(), -math.huge)
    H.equal(tide.tensor({ 1, math.huge }):logsumexp(), math.huge)
    H.equal(tide.tensor({ 1, 0 / 0 }):logsumexp(), 0 / 0)
  end)

  it("propagates NaN through sum, amax, amin and max/min", function()
    local n = tide.tensor({ { 1, 0 / 0, 3 }, { 4, 5, 6 } })
    H.equal(n:sum(2), { 0 / 0, 15 })
    H.equal(n:amax(), 0 / 0)
    H.equal(n:amin(2), { 0 / 0, 4 })
    H.equal(n:amax(1), { 4, 0 / 0, 6 })
    local v, i = n:max(2)
    H.equal(v, { 0 / 0, 6 })
    H.equal(i, { 2, 3 })
    v, i = n:min(2)
    H.equal(v, { 0 / 0, 4 })
    H.equal(i, { 2, 1 })
    H.equal(n:argmax(), 2)
    H.equal(n:argmin(), 2)
    H.equal(tide.tensor({ 1, 0 / 0, 0 / 0 }):argmax(), 2)
  end)

  it("keeps 0-d tensors as they are", function()
    local s = tide.tensor(5)
    for _, op in ipairs { "sum", "mean", "prod", "amax", "amin", "max", "min", "logsumexp" } do
      H.equal(s[op](s), 5, op)
      H.equal(s[op](s, nil, true), 5, op)
    end
    H.equal(s:sum(1), 5)
    H.equal(s:sum(-1, true), 5)
    H.equal(s:argmax(), 1)
    H.equal(s:argmin(1), 1)
    local v, i = s:max(1)
    H.equal(v, 5)
    H.equal(i, 1)
    H.equal(s:var(), 0 / 0)
    H.equal(s:all(), 1)
    H.equal(tide.tensor(0):any(), 0)
    H.equal(tide.tensor(7, "int32"):sum(), 7)
    assert.equal("int64", tide.tensor(7, "int32"):sum():dtype())
  end)

  it("reduce empty tensors to identities, and refuse extremes of nothing", function()
    local e = tide.zeros(0, 3)
    H.equal(e:sum(), 0)
    H.equal(e:sum(1), { 0, 0, 0 })
    H.equal(e:prod(1), { 1, 1, 1 })
    H.equal(e:mean(1), { 0 / 0, 0 / 0, 0 / 0 })
    H.equal(e:var(1), { 0 / 0, 0 / 0, 0 / 0 })
    H.equal(e:logsumexp(1), { -math.huge, -math.huge, -math.huge })
    H.equal(e:all(), 1)
    H.equal(e:any(1), { false, false, false })
    H.equal(tide.zeros({ 0, 3 }, "int32"):sum(1), { 0, 0, 0 })
    assert.same({ 0 }, e:sum(2):shape())
    assert.same({ 0, 1 }, e:amax(2, true):shape())
    assert.same({ 0 }, e:argmax(2):shape())
    assert.same({ 0, 3 }, e:cumsum(1):shape())
    assert.same({ 0, 3 }, e:softmax(2):shape())
    -- refused at the call (no sync needed), on every device
    for _, op in ipairs { "amax", "amin", "argmax", "argmin" } do
      assert.has_error(function() return e[op](e) end, op .. ": cannot reduce over an empty dimension of size 0")
      assert.has_error(function() return e[op](e, 1) end, op .. ": cannot reduce over an empty dimension of size 0")
    end
    assert.has_error(function() return e:max(1) end, "max_dim: cannot reduce over an empty dimension of size 0")
    assert.has_error(function() return e:min(1) end, "min_dim: cannot reduce over an empty dimension of size 0")
  end)

  it("sums large float32 tensors accurately", function()
    H.equal(tide.ones(1000000):sum(), 1000000)
    H.close(tide.full({ 1000000 }, 0.1):sum(), 1e5, 1e-5, 0)
    H.close(tide.full({ 1000000 }, 0.1):mean(), 0.1, 1e-6, 0)
    H.close(tide.full({ 1000, 1000 }, 0.1):sum(1), tide.full({ 1000 }, 100), 1e-5, 0)
    H.close(tide.full({ 1000, 1000 }, 0.1):sum(2), tide.full({ 1000 }, 100), 1e-5, 0)
    H.equal(tide.ones({ 4096, 4097 }, "int32"):sum(), 4096 * 4097)
  end)

  it("agrees with the reference on large tensors split across threads", function()
    for _, shape in ipairs { { 300, 700 }, { 7, 70000 }, { 70000, 7 } } do
      local x = data(shape, "float64", "sum", 7)
      for _, dims in ipairs { false, 1, 2 } do
        local d = dims or nil
        H.close(x:sum(d), (ref_reduce(x, d, false, F.sum)), 1e-12, 1e-9)
        H.close(x:amax(d), (ref_reduce(x, d, false, F.amax)), 0, 0)
        H.close(x:var(d), (ref_reduce(x, d, false, F.var)), 1e-12, 1e-12)
        H.close(x:t():sum(d), (ref_reduce(x:t(), d, false, F.sum)), 1e-12, 1e-9)
        H.close(x:argmin(d), (ref_reduce(x, d, false, F.argmin)), 0, 0)
      end
    end
    -- over leading and trailing dims around kept ones, read in place slice by slice:
    -- slices longer than a chunk (65536), and batch norm's [N, C, H, W] over {N, H, W}
    for _, case in ipairs { { { 3, 2, 70001 }, { 1, 3 } }, { { 16, 8, 14, 14 }, { 1, 3, 4 } }, { { 5, 3, 2, 7 }, { 1, 4 } } } do
      local x = data(case[1], "float64", "sum", 9)
      for _, op in ipairs { "sum", "mean", "amax", "amin", "prod" } do
        local v = op == "prod" and (x / 4 + 1) or x
        H.close(v[op](v, case[2]), (ref_reduce(v, case[2], false, F[op])), 1e-12, 1e-9, op)
      end
      local xf = x:float()
      H.close(xf:sum(case[2]), (ref_reduce(x, case[2], false, F.sum)), 1e-6, 1e-4, "float32 sum")
    end
  end)

  it("raises clear errors", function()
    assert.has_error(function() return x:sum(3) end, "sum: dimension 3 is out of range for a 2-d tensor")
    assert.has_error(function() return x:mean(-3) end, "mean: dimension -3 is out of range for a 2-d tensor")
    assert.has_error(function() return x:sum({ 1, 1 }) end, "sum: dimension 1 is repeated")
    assert.has_error(function() return x:amax({ 2, -1 }) end, "amax: dimension 2 is repeated")
    assert.has_error(function() return x:argmax({ 1, 2 }) end, "argmax: takes one dimension, 2 given")
    assert.has_error(function() return x:max(3) end, "max_dim: dimension 3 is out of range for a 2-d tensor")
    assert.has_error(function() return x:softmax(3) end, "softmax: dimension 3 is out of range for a 2-d tensor")
    assert.has_error(function() return x:cumsum() end, "cumsum: a dimension is required")
  end)
end)

-- -- max/min with a dim, argmax, argmin ------------------------------------------------------

describe("max, min, argmax, argmin", function()
  it("give values and 1-based indices of the first extreme", function()
    local x = tide.tensor({ { 3, 7, 7 }, { 9, 1, 9 } })
    local v, i = x:max(2)
    H.equal(v, { 7, 9 })
    H.equal(i, { 2, 1 })
    assert.equal("int64", i:dtype())
    v, i = x:min(1, true)
    H.equal(v, { { 3, 1, 7 } })
    H.equal(i, { { 1, 2, 1 } })
    v, i = x:max(-2)
    H.equal(v, { 9, 7, 9 })
    H.equal(i, { 2, 1, 2 })
    H.equal(x:argmax(), 4)
    H.equal(x:argmin(), 5)
    H.equal(x:argmax(2), { 2, 1 })
    H.equal(x:argmax(2, true), { { 2 }, { 1 } })
    H.equal(x:argmin(1), { 1, 2, 1 })
  end)

  it("match the reference over dims, layouts and dtypes", function()
    for _, dtype in ipairs(DTYPES) do
      local x0 = data({ 3, 4, 5 }, dtype, "max", 11)
      for lname, xl in pairs(layouts(x0)) do
        for _, dim in ipairs { 1, 2, 3, -1 } do
          for _, keep in ipairs { false, true } do
            local msg = string.format("%s %s dim=%d keepdim=%s", dtype, lname, dim, tostring(keep))
            local v, i = xl:max(dim, keep)
            assert.equal(dtype, v:dtype(), msg)
            H.equal(v, (ref_reduce(xl, dim, keep, F.amax)), msg)
            H.equal(i, (ref_reduce(xl, dim, keep, F.argmax)), msg)
            v, i = xl:min(dim, keep)
            H.equal(v, (ref_reduce(xl, dim, keep, F.amin)), msg)
            H.equal(i, (ref_reduce(xl, dim, keep, F.argmin)), msg)
            H.equal(xl:argmax(dim, keep), (ref_reduce(xl, dim, keep, F.argmax)), msg)
            H.equal(xl:argmin(dim, keep), (ref_reduce(xl, dim, keep, F.argmin)), msg)
          end
        end
        H.equal(xl:argmax(), (ref_reduce(xl, nil, false, F.argmax)), dtype .. " " .. lname)
        H.equal(xl:argmin(), (ref_reduce(xl, nil, false, F.argmin)), dtype .. " " .. lname)
      end
    end
  end)
end)

-- -- cumsum, softmax, log_softmax ---------------------------------------------------------------

-- Applies f(list) -> list along dim of x, in float64.
local function ref_along(x, dim, f)
  local shape, vals = x:shape(), H.flat(x:totable())
  local nd = #shape
  if nd == 0 then return f({ vals[1] })[1] end
  if dim < 0 then dim = dim + nd + 1 end
  local inner = 1
  for d = dim + 1, nd do inner = inner * shape[d] end
  local n, out = shape[dim], {}
  for base = 0, #vals - 1 do
    if math.floor(base / inner) % n == 0 then
      local line = {}
      for k = 0, n - 1 do line[k + 1] = vals[base + k * inner + 1] end
      local r = f(line)
      for k = 0, n - 1 do out[base + k * inner + 1] = r[k + 1] end
    end
  end
  return H.nest(out, shape)
end

local A = {}
function A.cumsum(l)
  local r, s = {}, 0
  for i, v in ipairs(l) do s = s + v; r[i] = s end
  return r
end
function A.cumprod(l)
  local r, s = {}, 1
  for i, v in ipairs(l) do s = s * v; r[i] = s end
  return r
end
function A.softmax(l)
  local m, s, r = F.amax(l), 0, {}
  for i, v in ipairs(l) do r[i] = math.exp(v - m); s = s + r[i] end
  for i = 1, #r do r[i] = r[i] / s end
  return r
end
function A.log_softmax(l)
  local m, s, r = F.amax(l), 0, {}
  for _, v in ipairs(l) do s = s + math.exp(v - m) end
  for i, v in ipairs(l) do r[i] = v - m - math.log(s) end
  return r
end

describe("cumsum, softmax, log_softmax", function()
  it("cumsum in bool says whether any element so far is true", function()
    local c = tide.tensor({ { false, true, false }, { false, false, false } }):cumsum(2, "bool")
    assert.are.equal("bool", c:dtype())
    assert.are.same({ { false, true, true }, { false, false, false } }, c:totable())
    -- stored as true itself, so bool ops read it right (a count of 2 did not eq true)
    assert.are.same({ true, true, true }, tide.ones(3, "bool"):cumsum(1, "bool"):eq(tide.ones(3, "bool")):totable())
    assert.are.equal(300, tide.ones(300, "bool"):cumsum(1, "bool"):to("int64"):sum():item())   -- no wrap at 256
    assert.are.same({ 0, 1, 2 }, tide.tensor({ false, true, true }):cumsum(1):totable())   -- counts in int64
  end)

  it("compute hand-computed values", function()
    local x = tide.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })
    H.equal(x:cumsum(1), { { 1, 2, 3 }, { 5, 7, 9 } })
    H.equal(x:cumsum(2), { { 1, 3, 6 }, { 4, 9, 15 } })
    H.equal(tide.tensor({ true, true, false, true }):cumsum(1), { 1, 2, 2, 3 })
    assert.equal("int64", tide.tensor({ 1, 2 }, "int32"):cumsum(1):dtype())
    assert.equal("float64", tide.tensor({ 1, 2 }, "int32"):cumsum(1, "float64"):dtype())
    local e = 1 + math.exp(1) + math.exp(2)
    H.close(x:softmax(2), { { 1 / e, math.exp(1) / e, math.exp(2) / e }, { 1 / e, math.exp(1) / e, math.exp(2) / e } })
    H.close(x:softmax(1), { { 1 / (1 + math.exp(3)), 1 / (1 + math.exp(3)), 1 / (1 + math.exp(3)) },
                            { 1 / (1 + math.exp(-3)), 1 / (1 + math.exp(-3)), 1 / (1 + math.exp(-3)) } })
    H.close(x:log_softmax(-1), { { -math.log(e) + 0, 1 - math.log(e), 2 - math.log(e) },
                                 { -math.log(e), 1 - math.log(e), 2 - math.log(e) } }, 1e-6, 1e-6)
    H.close(tide.tensor({ 1000, 1000 }):softmax(1), { 0.5, 0.5 })
    H.close(tide.tensor({ -1000, 0 }):log_softmax(1), { -1000, 0 })
    H.equal(tide.tensor(3):softmax(1), 1)
    H.equal(tide.tensor(3):log_softmax(-1), 0)
    H.equal(tide.tensor(3):cumsum(1), 3)
    H.equal(tide.tensor({ 1, 0 / 0 }):softmax(1), { 0 / 0, 0 / 0 })
  end)

  for _, op in ipairs { "cumsum", "cumprod", "softmax", "log_softmax" } do
    it(op .. " matches a float64 reference along each dim, layouts and dtypes", function()
      for _, dtype in ipairs(DTYPES) do
        local x0 = data({ 3, 4, 5 }, dtype, op, 3)
        local rdt = op:match("^cum") and result_dtype("sum", dtype) or result_dtype("mean", dtype)
        local rtol, atol = tol(rdt)
        for lname, xl in pairs(layouts(x0)) do
          for _, dim in ipairs { 1, 2, 3, -1, -3 } do
            local got = xl[op](xl, dim)
            local msg = string.format("%s %s %s dim=%d", op, dtype, lname, dim)
            assert.equal(rdt, got:dtype(), msg)
            H.close(got, ref_along(xl, dim, A[op]), rtol, atol, msg)
          end
        end
      end
    end)
  end

  it("cumprod: hand values, integer wrapping, bool, 0-d and empty", function()
    H.equal(tide.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }):cumprod(2), { { 1, 2, 6 }, { 4, 20, 120 } })
    H.equal(tide.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }):cumprod(1), { { 1, 2, 3 }, { 4, 10, 18 } })
    H.equal(tide.tensor({ 2, 0, 3, 0 / 0 }):cumprod(1), { 2, 0, 0, 0 / 0 })
    local big = tide.tensor({ 2 ^ 40, 2 ^ 40 }, "int64"):cumprod(1)   -- wraps as int64 multiplication does
    H.equal(big, { 2 ^ 40, 0 })
    assert.equal("int64", tide.tensor({ true, false }):cumprod(1):dtype())
    H.equal(tide.tensor({ true, true, false, true }):cumprod(1), { 1, 1, 0, 0 })
    H.equal(tide.tensor(3):cumprod(1), 3)
    assert.same({ 0, 3 }, tide.zeros(0, 3):cumprod(1):shape())
    assert.has_error(function() return tide.ones(2):cumprod() end, "cumprod: a dimension is required")
  end)

  it("cumprod's gradient is right with zeros in the line", function()
    local cases = { { 2, 3, 0.5, 4 }, { 2, 0, 3, 4 }, { 0, 3, 0, 4 }, { 1.5, -2, 0, 0 }, { 0, 0, 0, 2 } }
    for _, c in ipairs(cases) do
      local x = tide.tensor({ c, c }, "float64"):requires_grad_()
      assert.is_true(tide.autograd.gradcheck(function(a) return a:cumprod(2) * tide.tensor({ 1, -2, 3, 0.5 }, "float64") end,
        { x }), table.concat(c, " "))
    end
    -- by hand: d/dx2 of sum(cumprod([2, 0, 3])) = 2 + 2*3 = 8, x1 gets 1, x3 gets 0
    local x = tide.tensor({ 2, 0, 3 }, "float64"):requires_grad_()
    x:cumprod(1):sum():backward()
    H.equal(x.grad, { 1, 8, 0 })
  end)

  it("cummax and cummin: values and indices, NaN staying, ties taking the later index", function()
    local x = tide.tensor({ { 1, 3, 2, 3, 5 }, { 2, -1, 0 / 0, 9, 1 } })
    local v, i = x:cummax(2)
    H.equal(v, { { 1, 3, 3, 3, 5 }, { 2, 2, 0 / 0, 0 / 0, 0 / 0 } })
    H.equal(i, { { 1, 2, 2, 4, 5 }, { 1, 1, 3, 3, 3 } })
    local mv, mi = x:cummin(2)
    H.equal(mv, { { 1, 1, 1, 1, 1 }, { 2, -1, 0 / 0, 0 / 0, 0 / 0 } })
    H.equal(mi, { { 1, 1, 1, 1, 1 }, { 1, 2, 3, 3, 3 } })
    local cv, ci = x:cummax(1)
    H.equal(cv, { { 1, 3, 2, 3, 5 }, { 2, 3, 0 / 0, 9, 5 } })
    H.equal(ci, { { 1, 1, 1, 1, 1 }, { 2, 1, 2, 2, 1 } })
    for _, dt in ipairs { "int32", "int64", "uint8", "float64", "float16" } do
      local t = tide.tensor({ 4, 1, 7, 7, 2 }, dt)
      local a, b = tide.cummax(t, 1)
      assert.equal(dt, a:dtype())
      H.equal(a, { 4, 4, 7, 7, 7 }, dt)
      H.equal(b, { 1, 1, 3, 4, 4 }, dt)
      H.equal(t:cummin(-1), { 4, 1, 1, 1, 1 }, dt)
    end
    for name, t in pairs(layouts(tide.tensor({ { 3, 1, 4 }, { 1, 5, 9 } }))) do
      local flat = H.flat(t:totable())
      local r = {}
      for row = 0, 1 do
        local m = -math.huge
        for k = 1, 3 do m = math.max(m, flat[row * 3 + k]); r[row * 3 + k] = m end
      end
      H.equal(t:cummax(2), H.nest(r, { 2, 3 }), name)
    end
    local s, si = tide.tensor(5):cummax(1)
    H.equal(s, 5)
    H.equal(si, 1)
    assert.same({ 2, 0 }, tide.zeros(2, 0):cummin(2):shape())
    assert.has_error(function() return x:cummax() end, "cummax: a dimension is required")
    -- the gradient of each running maximum goes to where it was found
    local g = tide.tensor({ 1, 3, 2, 5 }, "float64"):requires_grad_()
    g:cummax(1):sum():backward()
    H.equal(g.grad, { 1, 2, 0, 1 })
  end)

  it("softmax and log_softmax of float32 rows of any length, with masked (-inf) and NaN elements", function()
    -- rows shorter than the vector lanes, one lane over, past the exp chunk of 1024
    for _, n in ipairs { 1, 16, 17, 1023, 1025, 3000 } do
      tide.manual_seed(n)
      local x = tide.randn(3, n) * 4
      if n > 2 then x[{ 2, { 2, n - 1 } }] = -1 / 0 end    -- a masked row keeps its ends
      local x64 = x:double()
      for _, dim in ipairs { 2, 1 } do                     -- along the rows, and across them
        local msg = ("n = %d, dim = %d"):format(n, dim)
        H.close(x:softmax(dim), x64:softmax(dim), 1e-5, 1e-7, msg)
        H.close(x:log_softmax(dim), x64:log_softmax(dim), 1e-5, 1e-5, msg)
        H.close(x:softmax(dim), ref_along(x64, dim, A.softmax), 1e-5, 1e-7, msg)
      end
    end
    local r = tide.tensor({ { 1, 0 / 0, 2, 3 }, { -1 / 0, -1 / 0, -1 / 0, -1 / 0 }, { 1 / 0, 0, 1, 2 } })
    for _, op in ipairs { "softmax", "log_softmax" } do
      local want = op == "softmax" and { 0 / 0, 0 / 0, 0 / 0, 0 / 0 } or { 0 / 0, 0 / 0, 0 / 0, 0 / 0 }
      for row = 1, 3 do H.equal(r[row][op](r[row], 1), want, op .. " row " .. row) end
      H.equal(r[op](r, 2), { want, want, want }, op)
    end
  end)

  it("work on large tensors split across threads", function()
    local x = data({ 200, 1000 }, "float64", "sum", 5)
    for _, dim in ipairs { 1, 2 } do
      H.close(x:cumsum(dim), ref_along(x, dim, A.cumsum), 1e-12, 1e-9)
      H.close(x:softmax(dim), ref_along(x, dim, A.softmax), 1e-12, 1e-15)
      H.close(x:t():log_softmax(dim), ref_along(x:t(), dim, A.log_softmax), 1e-12, 1e-12)
    end
  end)
end)
