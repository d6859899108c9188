-- shaping_spec: ops that rearrange whole tensors (cat, stack, flip, repeat,
-- tril, triu) and the Lua views that cut tensors apart (split, chunk,
-- unbind), against hand-computed values and a Lua reference, on every dtype
-- and layout, with their errors.
local tide = require "tide"
local H = require "spec.helpers"

local DTYPES = { "float32", "float64", "int32", "int64", "uint8", "bool", "float16", "bfloat16" }

-- -- a reference over flat row-major tables ---------------------------------------------

local function numel(shape)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  return n
end

local function coords(shape, i)
  local c = {}
  for d = #shape, 1, -1 do
    c[d] = i % shape[d] + 1
    i = math.floor(i / shape[d])
  end
  return c
end

local function flat_of(shape, c)
  local f, st = 0, 1
  for d = #shape, 1, -1 do
    f = f + (c[d] - 1) * st
    st = st * shape[d]
  end
  return f + 1
end

local function copy(t)
  local r = {}
  for i = 1, #t do r[i] = t[i] end
  return r
end

-- out[i] = f(coords of i in shape)
local function build(shape, f)
  local out = {}
  for i = 0, numel(shape) - 1 do out[i + 1] = f(coords(shape, i)) end
  return out
end

local ref = {}

function ref.cat(parts, dim)   -- parts: { {v, shape}, ... } of equal ndim
  local os = copy(parts[1][2])
  os[dim] = 0
  for _, p in ipairs(parts) do os[dim] = os[dim] + p[2][dim] end
  return build(os, function(c)
    local k = c[dim]
    for _, p in ipairs(parts) do
      if k <= p[2][dim] then
        local cc = copy(c)
        cc[dim] = k
        return p[1][flat_of(p[2], cc)]
      end
      k = k - p[2][dim]
    end
  end), os
end

function ref.stack(parts, dim)
  local s = parts[1][2]
  local os = copy(s)
  table.insert(os, dim, #parts)
  return build(os, function(c)
    local cc = copy(c)
    local k = table.remove(cc, dim)
    return parts[k][1][flat_of(s, cc)]
  end), os
end

function ref.flip(v, shape, dims)
  return build(shape, function(c)
    for _, d in ipairs(dims) do c[d] = shape[d] - c[d] + 1 end
    return v[flat_of(shape, c)]
  end)
end

function ref.repeat_(v, shape, reps)
  local lead = #reps - #shape
  local os = {}
  for d = 1, #reps do os[d] = reps[d] * (d > lead and shape[d - lead] or 1) end
  return build(os, function(c)
    local cc = {}
    for d = 1, #shape do cc[d] = (c[d + lead] - 1) % shape[d] + 1 end
    return v[#shape == 0 and 1 or flat_of(shape, cc)]
  end), os
end

function ref.tri(v, shape, k, lower)
  local n = #shape
  return build(shape, function(c)
    local i, j = c[n - 1], c[n]
    local keep = lower and j - i <= k or (not lower and j - i >= k)
    return keep and v[flat_of(shape, c)] or 0
  end)
end

local function ints(n, hi, seed, dtype)
  local v = H.values(n, 0, hi, seed)
  for i = 1, n do
    v[i] = math.floor(v[i])
    if dtype == "bool" then v[i] = v[i] % 2 end
  end
  return v
end

local function make(vals, shape, dtype)
  if numel(shape) == 0 then return tide.zeros(shape, dtype) end
  return tide.tensor(H.nest(vals, shape), dtype)
end

local function sync(f) return function() return tide.debug.sync(f) end end

-- -- cat ---------------------------------------------------------------------------------------

describe("cat", function()
  local a = tide.tensor({ { 1, 2 }, { 3, 4 } })
  local b = tide.tensor({ { 5, 6 } })

  it("joins along a dim", function()
    H.equal(tide.cat({ a, b }), { { 1, 2 }, { 3, 4 }, { 5, 6 } })
    H.equal(tide.cat({ a, b:t() }, 2), { { 1, 2, 5 }, { 3, 4, 6 } })
    H.equal(tide.cat({ a, a }, -1), { { 1, 2, 1, 2 }, { 3, 4, 3, 4 } })
    H.equal(tide.cat({ a }, 1), { { 1, 2 }, { 3, 4 } })
    H.equal(tide.cat({ tide.tensor({ 1 }), tide.tensor({ 2, 3 }) }), { 1, 2, 3 })
  end)

  it("promotes dtypes", function()
    local r = tide.cat({ tide.tensor({ 1, 2 }, "int32"), tide.tensor({ 2.5 }, "float64") })
    assert.are.equal("float64", r:dtype())
    H.equal(r, { 1, 2, 2.5 })
    local u = tide.cat({ tide.tensor({ true, false }), tide.tensor({ 7 }, "uint8") })
    assert.are.equal("uint8", u:dtype())
    H.equal(u, { 1, 0, 7 })
    local h = tide.cat({ tide.tensor({ 1.5 }, "float16"), tide.tensor({ 3 }, "int64") })
    assert.are.equal("float16", h:dtype())
    H.equal(h, { 1.5, 3 })
  end)

  it("matches the reference for every dtype and layout", function()
    local seed = 10
    for _, dtype in ipairs(DTYPES) do
      for dim = 1, 3 do
        seed = seed + 1
        local s1, s2, s3 = { 2, 3, 2 }, { 2, 3, 2 }, { 2, 3, 2 }
        s2[dim], s3[dim] = 1, 3
        local v1, v2, v3 = ints(numel(s1), 50, seed, dtype), ints(numel(s2), 50, seed + 1, dtype),
          ints(numel(s3), 50, seed + 2, dtype)
        local expect, os = ref.cat({ { v1, s1 }, { v2, s2 }, { v3, s3 } }, dim)
        local t3 = make(v3, s3, dtype)
        for n1, t1 in pairs(H.layouts(make(v1, s1, dtype))) do
          for n2, t2 in pairs(H.layouts(make(v2, s2, dtype))) do
            local r = tide.cat({ t1, t2, t3 }, dim)
            assert.are.equal(dtype, r:dtype())
            H.equal(r, H.nest(expect, os), dtype .. " " .. n1 .. "/" .. n2)
            H.equal(tide.cat({ t1, t2, t3 }, dim - 4), H.nest(expect, os), "negative dim")
          end
        end
      end
    end
  end)

  it("joins more than 8 tensors", function()
    local parts, expect = {}, {}
    for i = 1, 19 do
      parts[i] = tide.tensor({ { i, -i } })
      expect[i] = { i, -i }
    end
    H.equal(tide.cat(parts), expect)
  end)

  it("joins large tensors (the threaded path)", function()
    local x = tide.arange(300 * 400):view(300, 400)
    local r = tide.cat({ x, x:t():contiguous():t(), x }, 2)
    assert.are.same({ 300, 1200 }, r:shape())
    local g = r:totable()
    for i = 1, 300, 29 do
      for _, j in ipairs { 1, 77, 400 } do
        local v = (i - 1) * 400 + j - 1
        assert.are.equal(v, g[i][j])
        assert.are.equal(v, g[i][j + 400])
        assert.are.equal(v, g[i][j + 800])
      end
    end
  end)

  it("handles empty tensors, skipping 1-d empty ones as PyTorch does", function()
    H.equal(tide.cat({ tide.zeros(0), a }), { { 1, 2 }, { 3, 4 } })
    H.equal(tide.cat({ a, tide.zeros(0, "int64"), b }, 1), { { 1, 2 }, { 3, 4 }, { 5, 6 } })
    H.equal(tide.cat({ a, tide.zeros(0) }, 2), { { 1, 2 }, { 3, 4 } })
    assert.are.same({ 0 }, tide.cat({ tide.zeros(0), tide.zeros(0) }):shape())
    H.equal(tide.cat({ tide.zeros(0, 2), a }), { { 1, 2 }, { 3, 4 } })
    assert.are.same({ 0, 5 }, tide.cat({ tide.zeros(0, 2), tide.zeros(0, 3) }, 2):shape())
    assert.are.same({ 2, 0 }, tide.cat({ tide.zeros(2, 0), tide.zeros(2, 0) }, 2):shape())
  end)

  it("reports bad inputs", function()
    assert.has_error(function() return tide.cat({ a, tide.tensor(1) }) end,
      "cat: tensor 2 is 0-d and cannot be concatenated")
    assert.has_error(function() return tide.cat({ a, tide.zeros(3, 4) }) end,
      "cat: tensor 2 of shape [3,4] does not match tensor 1 of shape [2,2] except in dimension 1")
    assert.has_error(function() return tide.cat({ tide.zeros(0), a, tide.zeros(2) }) end,
      "cat: tensor 3 of shape [2] does not match tensor 2 of shape [2,2] except in dimension 1")
    assert.has_error(function() return tide.cat({ a, a }, 3) end, "cat: dimension 3 is out of range for a 2-d tensor")
    assert.has_error(function() return tide.cat({ a, a }, -3) end, "cat: dimension -3 is out of range for a 2-d tensor")
    assert.has_error(function() return tide.cat({}) end, "cat: expects a non-empty table of tensors")
    assert.has_error(function() return tide.cat(a) end, "cat: expects a table of tensors")
    assert.has_error(function() return tide.cat({ a, 1 }) end, "cat: element 2 must be a tensor, got number")
  end)
end)

-- -- stack ---------------------------------------------------------------------------------------

describe("stack", function()
  local a = tide.tensor({ 1, 2, 3 })
  local b = tide.tensor({ 4, 5, 6 })

  it("stacks along a new dim, which may be the last", function()
    H.equal(tide.stack({ a, b }), { { 1, 2, 3 }, { 4, 5, 6 } })
    H.equal(tide.stack({ a, b }, 2), { { 1, 4 }, { 2, 5 }, { 3, 6 } })
    H.equal(tide.stack({ a, b }, -1), { { 1, 4 }, { 2, 5 }, { 3, 6 } })
    H.equal(tide.stack({ a, b }, -2), { { 1, 2, 3 }, { 4, 5, 6 } })
    H.equal(tide.stack({ tide.tensor(1), tide.tensor(2) }), { 1, 2 })
    local r = tide.stack({ tide.tensor({ 1 }, "int32"), tide.tensor({ 0.5 }, "float64") })
    assert.are.equal("float64", r:dtype())
    H.equal(r, { { 1 }, { 0.5 } })
  end)

  it("matches the reference for every dtype and layout", function()
    local seed = 100
    for _, dtype in ipairs(DTYPES) do
      for dim = 1, 3 do
        seed = seed + 1
        local s = { 3, 2 }
        local v1, v2 = ints(6, 50, seed, dtype), ints(6, 50, seed + 1, dtype)
        local expect, os = ref.stack({ { v1, s }, { v2, s } }, dim)
        for n1, t1 in pairs(H.layouts(make(v1, s, dtype))) do
          for n2, t2 in pairs(H.layouts(make(v2, s, dtype))) do
            local r = tide.stack({ t1, t2 }, dim)
            assert.are.equal(dtype, r:dtype())
            H.equal(r, H.nest(expect, os), dtype .. " " .. n1 .. "/" .. n2)
            H.equal(tide.stack({ t1, t2 }, dim - 4), H.nest(expect, os), "negative dim")
          end
        end
      end
    end
  end)

  it("stacks more than 8 tensors", function()
    local parts, expect = {}, {}
    for i = 1, 17 do
      parts[i] = tide.tensor({ i, 2 * i })
      expect[i] = { i, 2 * i }
    end
    H.equal(tide.stack(parts), expect)
    local t = H.nest({}, { 0 })
    for j = 1, 2 do
      t[j] = {}
      for i = 1, 17 do t[j][i] = j * i end
    end
    H.equal(tide.stack(parts, 2), t)
    H.equal(tide.stack(parts, -1), t)
  end)

  it("handles empty tensors", function()
    assert.are.same({ 2, 0, 3 }, tide.stack({ tide.zeros(0, 3), tide.zeros(0, 3) }, 1):shape())
    assert.are.same({ 0, 2 }, tide.stack({ tide.zeros(0), tide.zeros(0) }, 2):shape())
  end)

  it("reports bad inputs", function()
    assert.has_error(function() return tide.stack({ a, tide.zeros(4) }) end,
      "stack: tensor 2 of shape [4] does not match tensor 1 of shape [3]")
    assert.has_error(function() return tide.stack({ a, b }, 3) end,
      "stack: dimension 3 is out of range for stacking 1-d tensors (1 to 2)")
    assert.has_error(function() return tide.stack({ a, b }, -3) end,
      "stack: dimension -3 is out of range for stacking 1-d tensors (1 to 2)")
    assert.has_error(function() return tide.stack({ tide.zeros(1, 1, 1, 1, 1, 1, 1, 1) }) end,
      "stack: stacking 8-d tensors gives 9 dimensions, at most 8 are supported")
  end)
end)

-- -- flip ---------------------------------------------------------------------------------------

describe("flip", function()
  local x = tide.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })

  it("reverses the given dims", function()
    H.equal(x:flip(1), { { 4, 5, 6 }, { 1, 2, 3 } })
    H.equal(x:flip(2), { { 3, 2, 1 }, { 6, 5, 4 } })
    H.equal(x:flip(-1, 1), { { 6, 5, 4 }, { 3, 2, 1 } })
    H.equal(tide.flip(x, { 1, 2 }), { { 6, 5, 4 }, { 3, 2, 1 } })
    H.equal(x:flip({}), { { 1, 2, 3 }, { 4, 5, 6 } })
  end)

  it("matches the reference for every dtype and layout", function()
    local seed = 300
    local s = { 2, 3, 4 }
    for _, dtype in ipairs(DTYPES) do
      seed = seed + 1
      local v = ints(24, 50, seed, dtype)
      for name, t in pairs(H.layouts(make(v, s, dtype))) do
        for _, dims in ipairs { { 1 }, { 2 }, { 3 }, { 1, 3 }, { 3, 2, 1 } } do
          local r = t:flip(dims)
          assert.are.equal(dtype, r:dtype())
          H.equal(r, H.nest(ref.flip(v, s, dims), s), dtype .. " " .. name)
        end
      end
    end
  end)

  it("flips large tensors", function()
    local n = 300 * 500
    local r = tide.arange(n):view(300, 500):flip(1, 2):view(n)
    local g = r:totable()
    for i = 1, n, 1237 do assert.are.equal(n - i, g[i]) end
  end)

  it("handles empty and 0-d tensors", function()
    assert.are.same({ 0, 3 }, tide.zeros(0, 3):flip(1):shape())
    H.equal(tide.tensor(4):flip(1), 4)
    H.equal(tide.tensor(4):flip({}), 4)
  end)

  it("reports bad dims at the call", function()
    assert.has_error(function() return x:flip(3) end, "flip: dimension 3 is out of range for a 2-d tensor")
    assert.has_error(function() return x:flip(1, -2) end, "flip: dimension 1 is repeated")
  end)
end)

-- -- repeat ---------------------------------------------------------------------------------------

describe("repeat", function()
  local x = tide.tensor({ { 1, 2 }, { 3, 4 } })

  it("tiles like PyTorch, with leading new dims", function()
    H.equal(x:repeat_tensor(1, 2), { { 1, 2, 1, 2 }, { 3, 4, 3, 4 } })
    H.equal(x["repeat"](x, 2, 1), { { 1, 2 }, { 3, 4 }, { 1, 2 }, { 3, 4 } })
    H.equal(tide.tensor({ 1, 2 }):repeat_tensor(2, 2), { { 1, 2, 1, 2 }, { 1, 2, 1, 2 } })
    H.equal(tide.repeat_tensor(x, { 2, 1, 1 }), { { { 1, 2 }, { 3, 4 } }, { { 1, 2 }, { 3, 4 } } })
  end)

  it("matches the reference for every dtype and layout", function()
    local seed = 400
    local s = { 2, 3 }
    for _, dtype in ipairs(DTYPES) do
      seed = seed + 1
      local v = ints(6, 50, seed, dtype)
      for name, t in pairs(H.layouts(make(v, s, dtype))) do
        for _, reps in ipairs { { 1, 1 }, { 2, 3 }, { 3, 1, 2 }, { 2, 1, 1, 2 } } do
          local expect, os = ref.repeat_(v, s, reps)
          local r = t:repeat_tensor(reps)
          assert.are.equal(dtype, r:dtype())
          H.equal(r, H.nest(expect, os), dtype .. " " .. name)
        end
      end
    end
  end)

  it("tiles many dims (more than 8 tile and element dims)", function()
    local s = { 2, 3, 2, 2, 2 }
    local v = ints(numel(s), 50, 9)
    local reps = { 2, 1, 3, 2, 2, 2 }
    local expect, os = ref.repeat_(v, s, reps)
    H.equal(make(v, s, "int64"):repeat_tensor(reps), H.nest(expect, os))
  end)

  it("tiles large tensors", function()
    local r = tide.arange(400):view(20, 20):repeat_tensor(30, 40)
    assert.are.same({ 600, 800 }, r:shape())
    local g = r:totable()
    for i = 1, 600, 37 do
      for j = 1, 800, 53 do assert.are.equal(((i - 1) % 20) * 20 + (j - 1) % 20, g[i][j]) end
    end
  end)

  it("handles empty and 0-d tensors", function()
    assert.are.same({ 0, 4 }, x:repeat_tensor(0, 2):shape())
    assert.are.same({ 3, 0 }, tide.zeros(1, 0):repeat_tensor(3, 5):shape())
    H.equal(tide.tensor(7):repeat_tensor(2, 3), { { 7, 7, 7 }, { 7, 7, 7 } })
    H.equal(tide.tensor(7):repeat_tensor({}), 7)
  end)

  it("reports bad repeats", function()
    assert.has_error(function() return x:repeat_tensor(2) end,
      "repeat: 1 repeats given for a 2-d tensor; at least 2 are needed")
    assert.has_error(function() return x:repeat_tensor(-1, 2) end, "repeat: repeat -1 for dimension 1 is negative")
    assert.has_error(function() return x:repeat_tensor(1, 1, 1, 1, 1, 1, 1, 1, 1) end,
      "repeat: 9 repeats give 9 dimensions, at most 8 are supported")
    assert.has_error(function() return x:repeat_tensor(1, 1.5) end, "repeat: repeats must be integers, got 1.5")
  end)
end)

-- -- tril, triu -----------------------------------------------------------------------------------

describe("tril and triu", function()
  local x = tide.tensor({ { 1, 2, 3 }, { 4, 5, 6 }, { 7, 8, 9 } })

  it("keep a triangle", function()
    H.equal(x:tril(), { { 1, 0, 0 }, { 4, 5, 0 }, { 7, 8, 9 } })
    H.equal(x:triu(), { { 1, 2, 3 }, { 0, 5, 6 }, { 0, 0, 9 } })
    H.equal(x:tril(1), { { 1, 2, 0 }, { 4, 5, 6 }, { 7, 8, 9 } })
    H.equal(x:tril(-1), { { 0, 0, 0 }, { 4, 0, 0 }, { 7, 8, 0 } })
    H.equal(x:triu(1), { { 0, 2, 3 }, { 0, 0, 6 }, { 0, 0, 0 } })
    H.equal(tide.triu(x, -1), { { 1, 2, 3 }, { 4, 5, 6 }, { 0, 8, 9 } })
    H.equal(x:tril(100), x)
    H.equal(x:tril(-100), { { 0, 0, 0 }, { 0, 0, 0 }, { 0, 0, 0 } })
    H.equal(x:triu(-100), x)
  end)

  it("matches the reference for every dtype and layout, batched", function()
    local seed = 500
    for _, s in ipairs { { 3, 4 }, { 4, 2 }, { 2, 3, 4 } } do
      for _, dtype in ipairs(DTYPES) do
        seed = seed + 1
        local v = ints(numel(s), 50, seed, dtype)
        for name, t in pairs(H.layouts(make(v, s, dtype))) do
          for _, k in ipairs { -2, 0, 1, 3 } do
            H.equal(t:tril(k), H.nest(ref.tri(v, s, k, true), s), dtype .. " tril " .. name .. " " .. k)
            H.equal(t:triu(k), H.nest(ref.tri(v, s, k, false), s), dtype .. " triu " .. name .. " " .. k)
          end
        end
      end
    end
  end)

  it("works in place on non-contiguous views (tril_, triu_)", function()
    for _, dtype in ipairs(DTYPES) do
      local base = tide.ones(4, 3, dtype)
      local v = base:t()   -- [3,4]
      local r = v:tril_()
      assert.is_true(rawequal(r, v))
      H.equal(v, { { 1, 0, 0, 0 }, { 1, 1, 0, 0 }, { 1, 1, 1, 0 } }, dtype)
      H.equal(base, { { 1, 1, 1 }, { 0, 1, 1 }, { 0, 0, 1 }, { 0, 0, 0 } }, dtype)
      local s = H.layouts(tide.ones(2, 3, 3, dtype)).strided
      s:triu_(1)
      H.equal(s, { { { 0, 1, 1 }, { 0, 0, 1 }, { 0, 0, 0 } }, { { 0, 1, 1 }, { 0, 0, 1 }, { 0, 0, 0 } } }, dtype)
    end
  end)

  it("handles large tensors", function()
    local t = tide.ones(600, 700)
    local r = t:tril(5):totable()
    for i = 1, 600, 31 do
      local n = 0
      for j = 1, 700 do n = n + r[i][j] end
      assert.are.equal(math.min(700, i + 5), n)
    end
    local u = t:triu(-3):totable()
    assert.are.equal(0, u[600][1])
    assert.are.equal(1, u[4][1])
    assert.are.equal(0, u[5][1])
  end)

  it("handles empty tensors", function()
    assert.are.same({ 0, 3 }, tide.zeros(0, 3):tril():shape())
    assert.are.same({ 2, 3, 0 }, tide.zeros(2, 3, 0):triu(1):shape())
  end)

  it("reports inputs of fewer than 2 dims at the call", function()
    assert.has_error(function() return tide.zeros(3):tril() end,
      "tril: the input must have at least 2 dimensions, got shape [3]")
    assert.has_error(function() return tide.tensor(1):triu() end,
      "triu: the input must have at least 2 dimensions, got shape []")
  end)
end)

-- -- split, chunk, unbind ----------------------------------------------------------------------------

describe("split, chunk and unbind", function()
  local t = tide.arange(10):view(2, 5)

  local function shapes(list)
    local r = {}
    for i, v in ipairs(list) do r[i] = table.concat(v:shape(), "x") end
    return r
  end

  it("split by a size or a table of sizes, as views", function()
    local p = t:split(2, 2)
    assert.are.same({ "2x2", "2x2", "2x1" }, shapes(p))
    H.equal(p[2], { { 2, 3 }, { 7, 8 } })
    H.equal(p[3], { { 4 }, { 9 } })
    assert.are.same({ "1x5", "1x5" }, shapes(t:split(1)))
    assert.are.same({ "2x1", "2x4" }, shapes(t:split({ 1, 4 }, -1)))
    H.equal(t:split({ 1, 4 }, 2)[2], { { 1, 2, 3, 4 }, { 6, 7, 8, 9 } })
    assert.are.same({ "2x5" }, shapes(t:split(7, 2)))
    local c = t:clone()
    c:split(2, 2)[2]:fill_(-1)
    H.equal(c, { { 0, 1, -1, -1, 4 }, { 5, 6, -1, -1, 9 } })
    assert.are.same({ "0x3" }, shapes(tide.zeros(0, 3):split(2)))
  end)

  it("chunk into at most n pieces", function()
    assert.are.same({ "2x2", "2x2", "2x1" }, shapes(t:chunk(3, 2)))
    assert.are.same({ "1x5", "1x5" }, shapes(t:chunk(2)))
    assert.are.same({ "2x5" }, shapes(t:chunk(1)))
    assert.are.same({ "2x2", "2x2", "2x1" }, shapes(t:chunk(4, -1)))   -- as PyTorch: 3 chunks of ceil(5/4) = 2
    H.equal(t:chunk(5, 2)[5], { { 4 }, { 9 } })
  end)

  it("unbind into slices", function()
    local r = t:unbind(2)
    assert.are.equal(5, #r)
    H.equal(r[4], { 3, 8 })
    local rows = t:unbind()
    assert.are.equal(2, #rows)
    H.equal(rows[2], { 5, 6, 7, 8, 9 })
    H.equal(t:unbind(-1)[1], { 0, 5 })
    assert.are.same({}, tide.zeros(0, 2):unbind())
  end)

  it("round-trips with cat and stack", function()
    H.equal(tide.cat(t:split(2, 2), 2), t)
    H.equal(tide.cat(t:chunk(2, 1), 1), t)
    H.equal(tide.stack(t:unbind(2), 2), t)
  end)

  it("reports bad arguments", function()
    assert.has_error(function() t:split(0) end, "split: size must be a positive integer, got 0")
    assert.has_error(function() t:split({ 1, 2 }, 2) end, "split: sizes add up to 3 but dimension 2 has size 5")
    assert.has_error(function() t:split(1, 3) end, "split: dimension 3 is out of range for a 2-d tensor")
    assert.has_error(function() t:chunk(0) end, "chunk: n must be a positive integer, got 0")
    assert.has_error(function() tide.tensor(1):unbind() end, "unbind: dimension 1 is out of range for a 0-d tensor")
  end)
end)

describe("unfold", function()
  it("takes windows of size every step elements as a view with a new last dim", function()
    H.equal(tide.arange(1, 8):unfold(1, 3, 2), { { 1, 2, 3 }, { 3, 4, 5 }, { 5, 6, 7 } })
    local m = tide.arange(12):reshape({ 3, 4 })
    local u = m:unfold(2, 2, 1)
    H.equal(u, { { { 0, 1 }, { 1, 2 }, { 2, 3 } }, { { 4, 5 }, { 5, 6 }, { 6, 7 } }, { { 8, 9 }, { 9, 10 }, { 10, 11 } } })
    H.equal(m:t():unfold(1, 2, 2), { { { 0, 1 }, { 4, 5 }, { 8, 9 } }, { { 2, 3 }, { 6, 7 }, { 10, 11 } } })
    H.equal(m:unfold(-1, 4, 1), { { { 0, 1, 2, 3 } }, { { 4, 5, 6, 7 } }, { { 8, 9, 10, 11 } } })
    assert.are.same({ 3, 1, 4 }, m:unfold(2, 4, 1):shape())
    u[{ 1, 2, 1 }] = 100   -- a view: it writes into m
    assert.are.equal(100, m[{ 1, 2 }]:item())
    H.equal(tide.tensor(5):unfold(1, 1, 1), { 5 })
  end)

  it("names bad arguments", function()
    local m = tide.zeros(3, 4)
    assert.has_error(function() m:unfold(3, 1, 1) end, "unfold: dimension 3 is out of range for a 2-d tensor")
    assert.has_error(function() m:unfold(2, 5, 1) end, "unfold: size 5 must be an integer from 0 to the dimension's length 4")
    assert.has_error(function() m:unfold(2, 2, 0) end, "unfold: step must be a positive integer, got 0")
  end)
end)
