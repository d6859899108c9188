-- index_spec: the ops that move elements by index tensors and masks
-- (index_select, gather, scatter, scatter_add, index_add, masked_select),
-- their in-place forms, the Lua indexing forms built on them (t[idx],
-- t[mask], t[mask] = v), against hand-computed values and a Lua reference.
local tide = require "tide"
local H = require "spec.helpers"

local DTYPES = { "float32", "float64", "int32", "int64", "uint8", "bool", "float16", "bfloat16" }
local NUM_DTYPES = { "float32", "float64", "int32", "int64", "uint8", "float16", "bfloat16" }

-- -- a reference over flat row-major tables ---------------------------------------------

local function numel(shape)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  return n
end

-- 1-based coordinates of 0-based row-major position i
local function coords(shape, i)
  local c = {}
  for d = #shape, 1, -1 do
    c[d] = i % shape[d] + 1
    i = math.floor(i / shape[d])
  end
  return c
end

-- 1-based flat position of 1-based coordinates
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

local ref = {}

function ref.index_select(xv, xs, dim, idx)
  local os = copy(xs)
  os[dim] = #idx
  local out = {}
  for i = 0, numel(os) - 1 do
    local c = coords(os, i)
    c[dim] = idx[c[dim]]
    out[i + 1] = xv[flat_of(xs, c)]
  end
  return out, os
end

function ref.gather(xv, xs, dim, iv, is)
  local out = {}
  for i = 0, numel(is) - 1 do
    local c = coords(is, i)
    c[dim] = iv[i + 1]
    out[i + 1] = xv[flat_of(xs, c)]
  end
  return out
end

function ref.scatter(xv, xs, dim, iv, is, sv, ss, add)
  local out = copy(xv)
  for i = 0, numel(is) - 1 do
    local c = coords(is, i)
    local v = sv[flat_of(ss, c)]
    c[dim] = iv[i + 1]
    local k = flat_of(xs, c)
    out[k] = add and out[k] + v or v
  end
  return out
end

function ref.index_add(xv, xs, dim, idx, sv, ss)
  local out = copy(xv)
  for i = 0, numel(ss) - 1 do
    local c = coords(ss, i)
    local v = sv[i + 1]
    c[dim] = idx[c[dim]]
    local k = flat_of(xs, c)
    out[k] = out[k] + v
  end
  return out
end

-- small integers, exact in every dtype (bool: 0/1)
local function ints(n, hi, seed, dtype)
  local v = H.values(n, 0, hi, seed)
  for i = 1, n do
    v[i] = math.floor(v[i])
    if dtype == "bool" then v[i] = v[i] % 2 end
  end
  return v
end

-- 1-based indices into a dimension of size `size`
local function indices(n, size, seed)
  local v = H.values(n, 1, size + 1, seed)
  for i = 1, n do v[i] = math.floor(v[i]) end
  return v
end

local function make(vals, shape, dtype)
  if numel(shape) == 0 then return tide.zeros(shape, dtype) end
  return tide.tensor(H.nest(vals, shape), dtype)
end

-- a random shape of 1..3 dims of sizes 1..4
local function shape_of(seed)
  local v = H.values(4, 0, 1, seed)
  local nd = 1 + math.floor(v[1] * 3)
  local s = {}
  for d = 1, nd do s[d] = 1 + math.floor(v[d + 1] * 4) end
  return s
end

local sync = H.sync

-- -- index_select ---------------------------------------------------------------------

describe("index_select", function()
  local x = tide.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })

  it("selects rows and columns by 1-based indices", function()
    H.equal(x:index_select(1, tide.tensor({ 2, 1, 2 }, "int64")), { { 4, 5, 6 }, { 1, 2, 3 }, { 4, 5, 6 } })
    H.equal(x:index_select(2, tide.tensor({ 3, 1 }, "int32")), { { 3, 1 }, { 6, 4 } })
    H.equal(x:index_select(-1, tide.tensor({ 1 }, "int64")), { { 1 }, { 4 } })
    H.equal(tide.index_select(x, -2, tide.tensor({ 2 }, "int64")), { { 4, 5, 6 } })
    assert.are.equal("float32", x:index_select(1, tide.tensor({ 1 }, "int64")):dtype())
  end)

  it("takes a 0-d index as one element", function()
    H.equal(x:index_select(2, tide.tensor(2, "int64")), { { 2 }, { 5 } })
  end)

  it("matches the reference for every dtype and layout", function()
    local seed = 1
    for _, dtype in ipairs(DTYPES) do
      for trial = 1, 4 do
        seed = seed + 1
        local xs = shape_of(seed)
        local xv = ints(numel(xs), 50, seed, dtype)
        local dim = 1 + (trial - 1) % #xs
        local idx = indices(1 + trial, xs[dim], seed + 100)
        local expect, os = ref.index_select(xv, xs, dim, idx)
        for name, xt in pairs(H.layouts(make(xv, xs, dtype))) do
          for iname, it in pairs(H.layouts(tide.tensor(idx, trial % 2 == 0 and "int32" or "int64"))) do
            local r = xt:index_select(dim, it)
            assert.are.equal(dtype, r:dtype())
            H.equal(r, H.nest(expect, os), dtype .. " " .. name .. "/" .. iname)
            H.equal(xt:index_select(dim - #xs - 1, it), H.nest(expect, os), "negative dim")
          end
        end
      end
    end
  end)

  it("handles large tensors (the threaded path)", function()
    local n, m = 300, 400
    local xt = tide.arange(n * m):view(n, m)
    local idx = indices(500, n, 7)
    local r = xt:index_select(1, tide.tensor(idx, "int64"))
    local got = r:totable()
    for i = 1, 500, 37 do
      assert.are.equal((idx[i] - 1) * m + 5, got[i][6])
    end
    local c = xt:t():index_select(2, tide.tensor(idx, "int64")) -- non-contiguous x, dim last
    local gc = c:totable()
    for i = 1, 500, 41 do assert.are.equal((idx[i] - 1) * m + 9, gc[10][i]) end
  end)

  it("handles empty and 0-d tensors", function()
    assert.are.same({ 0, 3 }, x:index_select(1, tide.tensor({}, "int64")):shape())
    assert.are.same({ 0, 2 }, tide.zeros(0, 3):index_select(2, tide.tensor({ 1, 3 }, "int64")):shape())
    local s = tide.tensor(5):index_select(1, tide.tensor({ 1 }, "int64"))
    assert.are.same({}, s:shape())
    assert.are.equal(5, s:item())
  end)

  it("reports bad indices, dtypes and shapes", function()
    assert.has_error(sync(function() return tide.zeros(4, 2):index_select(1, tide.tensor({ 1, 5 }, "int64")) end),
      "index_select: index 5 is out of range for dimension 1 of size 4")
    assert.has_error(sync(function() return x:index_select(2, tide.tensor({ 0 }, "int32")) end),
      "index_select: index 0 is out of range for dimension 2 of size 3")
    assert.has_error(sync(function() return x:index_select(1, tide.tensor({ -1 }, "int64")) end),
      "index_select: index -1 is out of range for dimension 1 of size 2")
    assert.has_error(sync(function() return tide.zeros(0, 3):index_select(1, tide.tensor({ 1 }, "int64")) end),
      "index_select: index 1 is out of range for dimension 1 of size 0")
    assert.has_error(function() return x:index_select(1, tide.tensor({ 1 })) end,
      "index_select: index must be an int32 or int64 tensor, got float32")
    assert.has_error(function() return x:index_select(1, tide.tensor({ { 1 } }, "int64")) end,
      "index_select: index must be 1-d, got shape [1,1]")
    assert.has_error(function() return x:index_select(3, tide.tensor({ 1 }, "int64")) end,
      "index_select: dimension 3 is out of range for a 2-d tensor")
    assert.has_error(function() return x:index_select(nil, tide.tensor({ 1 }, "int64")) end,
      "index_select: a dimension is required")
    assert.has_error(function() return tide.tensor(5):index_select(1, tide.tensor({ 1, 1 }, "int64")) end,
      "index_select: a 0-d input takes an index of one element, got 2")
    assert.has_error(function() return x:index_select(1, { 1 }) end, "index_select: index must be a tensor, got table")
  end)

  it("reports a bad index found later by the queued op", function()
    local y = tide.zeros(300, 300) + 1
    local ok, err = pcall(function()   -- raised by the call or by the wait, as the engine runs it
      local z = y:index_select(2, tide.tensor({ 1, 301 }, "int64"))
      return z:totable()
    end)
    assert.is_false(ok)
    assert.matches("index_select: index 301 is out of range for dimension 2 of size 300", err, 1, true)
  end)
end)

-- -- gather ---------------------------------------------------------------------------------

describe("gather", function()
  local x = tide.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })

  it("gathers along a dim like PyTorch", function()
    H.equal(x:gather(2, tide.tensor({ { 1, 1 }, { 3, 2 } }, "int64")), { { 1, 1 }, { 6, 5 } })
    H.equal(x:gather(1, tide.tensor({ { 2, 1, 2 } }, "int64")), { { 4, 2, 6 } })
    H.equal(x:gather(-1, tide.tensor({ { 3 }, { 1 } }, "int32")), { { 3 }, { 4 } })
    H.equal(tide.gather(x, 1, tide.tensor({ { 1 }, { 2 } }, "int64")), { { 1 }, { 4 } })
  end)

  it("matches the reference for every dtype and layout", function()
    local seed = 50
    for _, dtype in ipairs(DTYPES) do
      for trial = 1, 4 do
        seed = seed + 1
        local xs = shape_of(seed)
        local dim = 1 + (trial - 1) % #xs
        local is = {}
        for d = 1, #xs do is[d] = d == dim and trial or math.max(1, xs[d] - (trial % 2)) end
        local xv = ints(numel(xs), 50, seed, dtype)
        local iv = indices(numel(is), xs[dim], seed + 7)
        local expect = ref.gather(xv, xs, dim, iv, is)
        for name, xt in pairs(H.layouts(make(xv, xs, dtype))) do
          for iname, it in pairs(H.layouts(make(iv, is, trial % 2 == 0 and "int32" or "int64"))) do
            local r = xt:gather(dim, it)
            assert.are.equal(dtype, r:dtype())
            H.equal(r, H.nest(expect, is), dtype .. " " .. name .. "/" .. iname)
          end
        end
      end
    end
  end)

  it("handles large tensors (the threaded path)", function()
    local xs, is = { 200, 300 }, { 200, 250 }
    local xv = ints(numel(xs), 1000, 3)
    local iv = indices(numel(is), 300, 4)
    local expect = ref.gather(xv, xs, 2, iv, is)
    H.equal(make(xv, xs, "float64"):gather(2, make(iv, is, "int64")), H.nest(expect, is))
  end)

  it("handles empty and 0-d tensors", function()
    assert.are.same({ 2, 0 }, x:gather(2, tide.zeros({ 2, 0 }, "int64")):shape())
    local s = tide.tensor(5):gather(1, tide.tensor(1, "int64"))
    assert.are.same({}, s:shape())
    assert.are.equal(5, s:item())
  end)

  it("reports bad indices and shapes", function()
    assert.has_error(sync(function() return x:gather(1, tide.tensor({ { 1, 3 } }, "int64")) end),
      "gather: index 3 is out of range for dimension 1 of size 2")
    assert.has_error(sync(function() return x:gather(2, tide.tensor({ { 0 } }, "int64")) end),
      "gather: index 0 is out of range for dimension 2 of size 3")
    assert.has_error(sync(function() return x:gather(2, tide.tensor({ { 1 }, { -1 } }, "int32")) end),
      "gather: index -1 is out of range for dimension 2 of size 3")
    assert.has_error(function() return x:gather(1, tide.tensor({ 1 }, "int64")) end,
      "gather: index of shape [1] and input of shape [2,3] must have the same number of dimensions")
    assert.has_error(function() return x:gather(1, tide.tensor({ { 1, 1, 1, 1 } }, "int64")) end,
      "gather: index of shape [1,4] is larger than the input of shape [2,3] at dimension 2")
    assert.has_error(function() return x:gather(1, tide.tensor({ { true } })) end,
      "gather: index must be an int32 or int64 tensor, got bool")
    assert.has_error(function() return x:gather(-3, tide.tensor({ { 1 } }, "int64")) end,
      "gather: dimension -3 is out of range for a 2-d tensor")
  end)
end)

-- -- scatter, scatter_add -------------------------------------------------------------------------

describe("scatter and scatter_add", function()
  it("scatter src values along a dim", function()
    local src = tide.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })
    H.equal(tide.zeros(3, 3):scatter(1, tide.tensor({ { 1, 2, 3 } }, "int64"), src),
      { { 1, 0, 0 }, { 0, 2, 0 }, { 0, 0, 3 } })
    H.equal(tide.zeros(2, 4):scatter(2, tide.tensor({ { 4, 1 }, { 2, 2 } }, "int32"), src),
      { { 2, 0, 0, 1 }, { 0, 5, 0, 0 } })
    H.equal(tide.zeros(2, 2):scatter(-1, tide.tensor({ { 2 }, { 1 } }, "int64"), tide.full({ 2, 1 }, 7)),
      { { 0, 7 }, { 7, 0 } })
  end)

  it("scatter takes a number as src", function()
    H.equal(tide.zeros(2, 2):scatter(-1, tide.tensor({ { 2 }, { 1 } }, "int64"), 7), { { 0, 7 }, { 7, 0 } })
    H.equal(tide.zeros(2, 3, "int64"):scatter_(1, tide.tensor({ { 2, 1, 2 } }, "int64"), 4),
      { { 0, 4, 0 }, { 4, 0, 4 } })
    H.equal(tide.zeros(3):index_add(1, tide.tensor({ 3, 3 }, "int64"), 2.5), { 0, 0, 5 })
  end)

  it("scatter_add sums duplicates", function()
    local src = tide.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })
    H.equal(tide.zeros(3, 3):scatter_add(1, tide.tensor({ { 1, 1, 3 }, { 1, 2, 3 } }, "int64"), src),
      { { 5, 2, 0 }, { 0, 5, 0 }, { 0, 0, 9 } })
    H.equal(tide.ones(1, 2, "int64"):scatter_add(2, tide.tensor({ { 2, 2, 2 } }, "int64"), tide.ones(1, 3, "int64")),
      { { 1, 4 } })
  end)

  it("matches the reference for every dtype and layout", function()
    local seed = 200
    for _, add in ipairs { false, true } do
      for _, dtype in ipairs(add and NUM_DTYPES or DTYPES) do
        for trial = 1, 3 do
          seed = seed + 1
          local xs = shape_of(seed)
          local dim = 1 + (trial - 1) % #xs
          local is, ss = {}, {}
          for d = 1, #xs do
            is[d] = d == dim and 1 + trial or math.max(1, xs[d] - (trial % 2))
            ss[d] = is[d] + (trial == 2 and 1 or 0)
          end
          local xv = ints(numel(xs), 20, seed, dtype)
          local sv = ints(numel(ss), 20, seed + 3, dtype)
          local iv = indices(numel(is), xs[dim], seed + 5)
          local expect = ref.scatter(xv, xs, dim, iv, is, sv, ss, add)
          local st = make(sv, ss, dtype)
          for name, xt in pairs(H.layouts(make(xv, xs, dtype))) do
            for iname, it in pairs(H.layouts(make(iv, is, "int64"))) do
              local r = add and xt:scatter_add(dim, it, st) or xt:scatter(dim, it, st)
              assert.are.equal(dtype, r:dtype())
              H.equal(r, H.nest(expect, xs), dtype .. " " .. name .. "/" .. iname)
              H.equal(xt, H.nest(xv, xs), "the input is unchanged")
            end
          end
          for sname, s2 in pairs(H.layouts(st)) do   -- strided src
            local r = add and tide.scatter_add(make(xv, xs, dtype), dim, make(iv, is, "int32"), s2)
              or tide.scatter(make(xv, xs, dtype), dim, make(iv, is, "int32"), s2)
            H.equal(r, H.nest(expect, xs), dtype .. " src " .. sname)
          end
        end
      end
    end
  end)

  it("scatters large tensors in order (the threaded path)", function()
    local xs, is = { 300, 200 }, { 300, 150 }
    local xv = ints(numel(xs), 100, 11)
    local sv = ints(numel(is), 100, 12)
    for _, dim in ipairs { 1, 2 } do
      local iv = indices(numel(is), xs[dim], 13 + dim)
      for _, add in ipairs { false, true } do
        local expect = ref.scatter(xv, xs, dim, iv, is, sv, is, add)
        local x, i, s = make(xv, xs, "float64"), make(iv, is, "int64"), make(sv, is, "float64")
        H.equal(add and x:scatter_add(dim, i, s) or x:scatter(dim, i, s), H.nest(expect, xs))
      end
    end
  end)

  it("converts src of a lower dtype category", function()
    H.equal(tide.zeros(2, "float64"):scatter(1, tide.tensor({ 2 }, "int64"), tide.tensor({ 3 }, "int32")), { 0, 3 })
    H.equal(tide.zeros(2, "int64"):scatter_add(1, tide.tensor({ 2 }, "int64"), tide.tensor({ true })), { 0, 1 })
  end)

  it("writes in place into non-contiguous views (scatter_, scatter_add_)", function()
    local base = tide.zeros(4, 3)
    local v = base:t()            -- [3,4], transposed
    local r = v:scatter_(2, tide.tensor({ { 4 }, { 1 }, { 2 } }, "int64"), tide.tensor({ { 1 }, { 2 }, { 3 } }))
    assert.is_true(rawequal(r, v))
    H.equal(v, { { 0, 0, 0, 1 }, { 2, 0, 0, 0 }, { 0, 3, 0, 0 } })
    H.equal(base, { { 0, 2, 0 }, { 0, 0, 3 }, { 0, 0, 0 }, { 1, 0, 0 } })
    v:scatter_add_(1, tide.tensor({ { 1, 1, 1, 1 }, { 1, 1, 1, 1 } }, "int64"), tide.ones(2, 4))
    H.equal(base, { { 2, 2, 0 }, { 2, 0, 3 }, { 2, 0, 0 }, { 3, 0, 0 } })
    for _, dtype in ipairs { "float16", "bfloat16", "uint8", "int32" } do   -- through a temporary, or direct
      local s = H.layouts(tide.tensor({ { 1, 2 }, { 3, 4 } }, dtype)).strided
      s:scatter_add_(2, tide.tensor({ { 2, 2 }, { 1, 1 } }, "int64"), tide.tensor({ { 10, 20 }, { 30, 40 } }, dtype))
      H.equal(s, { { 1, 32 }, { 73, 4 } }, dtype)
      s:scatter_(1, tide.tensor({ { 2 } }, "int64"), tide.tensor({ { 9 } }, dtype))
      H.equal(s, { { 1, 32 }, { 9, 4 } }, dtype)
    end
  end)

  it("handles empty and 0-d tensors", function()
    H.equal(tide.ones(2, 2):scatter(1, tide.zeros({ 0, 2 }, "int64"), tide.zeros(0, 2)), { { 1, 1 }, { 1, 1 } })
    assert.are.same({ 0, 2 }, tide.zeros(0, 2):scatter_add(2, tide.zeros({ 0, 2 }, "int64"), tide.zeros(0, 2)):shape())
    H.equal(tide.tensor(5):scatter(1, tide.tensor(1, "int64"), tide.tensor(7)), 7)
    H.equal(tide.tensor(5):scatter_add(1, tide.tensor(1, "int64"), tide.tensor(7)), 12)
  end)

  it("reports bad indices, shapes and dtypes", function()
    local x = tide.zeros(2, 3)
    assert.has_error(sync(function() return x:scatter(2, tide.tensor({ { 4 } }, "int64"), tide.ones(1, 1)) end),
      "scatter: index 4 is out of range for dimension 2 of size 3")
    assert.has_error(sync(function() return x:scatter_add(1, tide.tensor({ { 1, 0 } }, "int64"), tide.ones(1, 2)) end),
      "scatter_add: index 0 is out of range for dimension 1 of size 2")
    assert.has_error(sync(function() return x:scatter_(1, tide.tensor({ { -2 } }, "int32"), tide.ones(1, 1)) end),
      "scatter: index -2 is out of range for dimension 1 of size 2")
    assert.has_error(function() return x:scatter(1, tide.tensor({ 1 }, "int64"), tide.ones(1)) end,
      "scatter: input of shape [2,3], index of shape [1] and src of shape [1] must have the same number of dimensions")
    assert.has_error(function() return x:scatter(1, tide.ones({ 1, 2 }, "int64"), tide.ones(1, 1)) end,
      "scatter: index of shape [1,2] is larger than src of shape [1,1] at dimension 2")
    assert.has_error(function() return x:scatter(1, tide.ones({ 1, 4 }, "int64"), tide.ones(2, 4)) end,
      "scatter: index of shape [1,4] is larger than the input of shape [2,3] at dimension 2")
    assert.has_error(function() return x:scatter(1, tide.ones({ 1, 1 }), tide.ones(1, 1)) end,
      "scatter: index must be an int32 or int64 tensor, got float32")
    assert.has_error(function() return tide.zeros(2, "int64"):scatter(1, tide.ones(1, "int64"), tide.ones(1)) end,
      "scatter: src of dtype float32 cannot be written into the input of dtype int64")
    -- the registry names the promoted dtype of all inputs (int64 here), not the input's: see the report
    local ok, err = pcall(function() return tide.zeros(2, "bool"):scatter_add(1, tide.ones(1, "int64"), tide.ones(1, "bool")) end)
    assert.is_false(ok)
    assert.matches("scatter_add: dtype %w+ is not supported", err)
    assert.has_error(function() return x:scatter(1, tide.ones({ 1, 1 }, "int64"), "a") end,
      "scatter: src must be a tensor, got string")
  end)
end)

-- -- index_add ---------------------------------------------------------------------------------

describe("index_add", function()
  it("adds src slices at 1-based indices, summing duplicates", function()
    local x = tide.ones(3, 2)
    H.equal(x:index_add(1, tide.tensor({ 3, 1, 3 }, "int64"), tide.tensor({ { 1, 2 }, { 3, 4 }, { 5, 6 } })),
      { { 4, 5 }, { 1, 1 }, { 7, 9 } })
    H.equal(x:index_add(-1, tide.tensor({ 2 }, "int32"), tide.tensor({ { 1 }, { 2 }, { 3 } })),
      { { 1, 2 }, { 1, 3 }, { 1, 4 } })
  end)

  it("matches the reference for every dtype and layout", function()
    local seed = 400
    for _, dtype in ipairs(NUM_DTYPES) do
      for trial = 1, 4 do
        seed = seed + 1
        local xs = shape_of(seed)
        local dim = 1 + (trial - 1) % #xs
        local idx = indices(trial + 1, xs[dim], seed + 9)
        local ss = copy(xs)
        ss[dim] = #idx
        local xv, sv = ints(numel(xs), 20, seed, dtype), ints(numel(ss), 20, seed + 1, dtype)
        local expect = ref.index_add(xv, xs, dim, idx, sv, ss)
        for name, xt in pairs(H.layouts(make(xv, xs, dtype))) do
          for sname, st in pairs(H.layouts(make(sv, ss, dtype))) do
            H.equal(xt:index_add(dim, tide.tensor(idx, "int64"), st), H.nest(expect, xs), dtype .. " " .. name .. "/" .. sname)
          end
          local inplace = xt:clone()
          local v = H.layouts(inplace)[name] or inplace
          v:index_add_(dim, tide.tensor(idx, "int32"), make(sv, ss, dtype))
          H.equal(v, H.nest(expect, xs), dtype .. " in place " .. name)
        end
      end
    end
  end)

  it("adds in place into a non-contiguous view (index_add_)", function()
    local base = tide.zeros(3, 2, "int64")
    local v = base:t()   -- [2,3]
    v:index_add_(2, tide.tensor({ 3, 3, 1 }, "int64"), tide.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, "int64"))
    H.equal(base, { { 3, 6 }, { 0, 0 }, { 3, 9 } })
  end)

  it("handles large tensors (the threaded path)", function()
    local xs = { 400, 300 }
    local idx = indices(350, 300, 21)
    local ss = { 400, 350 }
    local xv, sv = ints(numel(xs), 50, 22), ints(numel(ss), 50, 23)
    local expect = ref.index_add(xv, xs, 2, idx, sv, ss)
    H.equal(make(xv, xs, "float64"):index_add(2, tide.tensor(idx, "int64"), make(sv, ss, "float64")), H.nest(expect, xs))
  end)

  it("handles empty and 0-d tensors", function()
    H.equal(tide.ones(2, 2):index_add(1, tide.tensor({}, "int64"), tide.zeros(0, 2)), { { 1, 1 }, { 1, 1 } })
    H.equal(tide.tensor(5):index_add(1, tide.tensor({ 1 }, "int64"), tide.tensor(2)), 7)
  end)

  it("reports bad indices and shapes", function()
    local x = tide.zeros(3, 2)
    assert.has_error(sync(function() return x:index_add(1, tide.tensor({ 4 }, "int64"), tide.ones(1, 2)) end),
      "index_add: index 4 is out of range for dimension 1 of size 3")
    assert.has_error(function() return x:index_add(1, tide.tensor({ 1, 2 }, "int64"), tide.ones(3, 2)) end,
      "index_add: src of shape [3,2] should have shape [2,2]: the input's shape [3,2] with dimension 1 of the index's length 2")
    assert.has_error(function() return x:index_add(1, tide.tensor({ { 1 } }, "int64"), tide.ones(1, 2)) end,
      "index_add: index must be 1-d, got shape [1,1]")
    assert.has_error(function() return x:index_add(1, tide.tensor({ 1 }, "int64"), tide.ones(1)) end,
      "index_add: src of shape [1] should have shape [1,2]: the input's shape [3,2] with dimension 1 of the index's length 1")
    assert.has_error(function() return x:int():index_add(1, tide.tensor({ 1 }, "int64"), tide.ones(1, 2)) end,
      "index_add: src of dtype float32 cannot be written into the input of dtype int32")
    local ok, err = pcall(function() return tide.zeros(2, "bool"):index_add(1, tide.tensor({ 1 }, "int64"), tide.ones(1, "bool")) end)
    assert.is_false(ok)
    assert.matches("index_add: dtype %w+ is not supported", err)
  end)
end)

-- -- masked_select -----------------------------------------------------------------------------

describe("masked_select", function()
  local x = tide.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })

  it("selects true elements in row-major order", function()
    H.equal(x:masked_select(x:gt(2)), { 3, 4, 5, 6 })
    H.equal(tide.masked_select(x, tide.tensor({ { true, false, true }, { false, true, false } })), { 1, 3, 5 })
  end)

  it("broadcasts the mask and the input", function()
    H.equal(x:masked_select(tide.tensor({ true, false, true })), { 1, 3, 4, 6 })
    H.equal(x:masked_select(tide.tensor({ { false }, { true } })), { 4, 5, 6 })
    H.equal(tide.tensor({ 7, 8 }):masked_select(tide.tensor({ { true }, { false }, { true } })), { 7, 8, 7, 8 })
  end)

  it("matches the reference for every dtype and layout", function()
    local seed = 600
    for _, dtype in ipairs(DTYPES) do
      seed = seed + 1
      local xs = { 3, 4 }
      local xv, mv = ints(12, 50, seed, dtype), ints(12, 2, seed + 1, "bool")
      local expect = {}
      for i = 1, 12 do if mv[i] == 1 then expect[#expect + 1] = xv[i] end end
      for name, xt in pairs(H.layouts(make(xv, xs, dtype))) do
        for mname, mt in pairs(H.layouts(make(mv, xs, "bool"))) do
          local r = xt:masked_select(mt)
          assert.are.equal(dtype, r:dtype())
          if #expect == 0 then assert.are.same({ 0 }, r:shape()) else H.equal(r, expect, name .. "/" .. mname) end
        end
      end
    end
  end)

  it("handles large tensors (the chunked threaded path)", function()
    local n = 200000
    local xt = tide.arange(n)
    local m = tide.remainder(xt, 7):eq(3)
    local r = xt:masked_select(m)
    local k = 0
    for i = 3, n - 1, 7 do k = k + 1 end
    assert.are.same({ k }, r:shape())
    local got = r:totable()
    for j = 1, k, 997 do assert.are.equal(3 + 7 * (j - 1), got[j]) end
    assert.are.equal(3 + 7 * (k - 1), got[k])
  end)

  it("waits for the mask written by queued ops", function()
    local big = tide.zeros(500, 500)
    local m = (big + 1):gt(0)   -- queued
    assert.are.same({ 250000 }, big:masked_select(m):shape())
  end)

  it("handles empty and 0-d tensors", function()
    assert.are.same({ 0 }, x:masked_select(x:gt(10)):shape())
    assert.are.same({ 0 }, tide.zeros(0, 3):masked_select(tide.zeros({ 0, 3 }, "bool")):shape())
    H.equal(tide.tensor(5):masked_select(tide.tensor(true)), { 5 })
    assert.are.same({ 0 }, tide.tensor(5):masked_select(tide.tensor(false)):shape())
    H.equal(x:masked_select(tide.tensor(true)), { 1, 2, 3, 4, 5, 6 })
  end)

  it("reports bad masks", function()
    assert.has_error(function() return x:masked_select(tide.ones(2, 3, "uint8")) end,
      "masked_select: mask must be a bool tensor, got uint8")
    assert.has_error(function() return x:masked_select(tide.ones(4, "bool")) end,
      "masked_select: shapes [2,3] and [4] cannot be broadcast: size 3 ~= 4 at dimension 2")
    assert.has_error(function() return x:masked_select(1) end, "masked_select: mask must be a tensor, got number")
  end)
end)

-- -- Lua indexing forms ----------------------------------------------------------------------

describe("indexing by tensors", function()
  it("t[idx] selects along the first dimension", function()
    local t = tide.tensor({ { 1, 2 }, { 3, 4 }, { 5, 6 } })
    H.equal(t[tide.tensor({ 3, 1 }, "int64")], { { 5, 6 }, { 1, 2 } })
    H.equal(tide.tensor({ 10, 20, 30 })[tide.tensor({ 2, 2 }, "int32")], { 20, 20 })
    assert.has_error(sync(function() return t[tide.tensor({ 4 }, "int64")] end),
      "index_select: index 4 is out of range for dimension 1 of size 3")
  end)

  it("t[mask] selects the true elements", function()
    local t = tide.tensor({ { 1, -2 }, { -3, 4 } })
    H.equal(t[t:lt(0)], { -2, -3 })
    H.equal(t[tide.tensor({ true, false })], { 1, -3 })
  end)

  it("t[mask] = v fills the true elements in place", function()
    local t = tide.tensor({ { 1, -2 }, { -3, 4 } })
    t[t:lt(0)] = 0
    H.equal(t, { { 1, 0 }, { 0, 4 } })
    t[tide.tensor({ false, true })] = tide.tensor(9)
    H.equal(t, { { 1, 9 }, { 0, 9 } })
    local base = tide.zeros(2, 3, "int32")
    local v = base:t()
    v[tide.tensor({ { true, false }, { false, false }, { false, true } })] = 5
    H.equal(base, { { 5, 0, 0 }, { 0, 0, 5 } })
  end)

  it("refuses assignment through an index tensor", function()
    local t = tide.zeros(3)
    assert.has_error(function() t[tide.tensor({ 1 }, "int64")] = 1 end,
      "index: assigning through an index tensor is not supported; use index_copy_ or scatter_")
  end)
end)
