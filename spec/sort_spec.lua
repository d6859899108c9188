-- sort_spec: sort, argsort, msort and topk along a dim against a plain-Lua
-- stable sort: both directions, every dtype, NaN/inf/signed zeros, ties (their
-- indices in input order), every layout, 0-d and empty tensors, the gradient,
-- jit capture and the errors; then what is built on them (kthvalue, median,
-- quantile, unique) and searchsorted/bucketize against a linear search.
local tide = require "tide"
local H = require "spec.helpers"

local inf, nan = math.huge, 0 / 0

-- The stable order of a Lua list (NaN above everything, -0 == 0): values and 1-based positions.
local function ref_sort(list, desc)
  local pos = {}
  for i = 1, #list do pos[i] = i end
  local function before(a, b)   -- a strictly before b
    local x, y = list[a], list[b]
    local xn, yn = x ~= x, y ~= y
    if xn or yn then
      if desc then return xn and not yn end
      return yn and not xn
    end
    if desc then return x > y end
    return x < y
  end
  table.sort(pos, function(a, b)
    if before(a, b) then return true end
    if before(b, a) then return false end
    return a < b
  end)
  local vals = {}
  for i, p in ipairs(pos) do vals[i] = list[p] end
  return vals, pos
end

-- The rows of a 2-d nested table sorted along dim 2 (the last), values and positions.
local function ref_rows(rows, desc, k)
  local v, p = {}, {}
  for r, row in ipairs(rows) do
    local sv, sp = ref_sort(row, desc)
    v[r], p[r] = {}, {}
    for i = 1, k or #row do v[r][i], p[r][i] = sv[i], sp[i] end
  end
  return v, p
end

-- NaN-aware exact comparison of a tensor with a nested table
local function same(t, expected, msg) H.equal(t, expected, msg) end

describe("sort", function()
  local rows = { { 3, 1, 2, 1, -5 }, { nan, -1, 5, -0.0, 0 }, { inf, -inf, 2, nan, 2 } }

  it("sorts each row, ascending and descending, with NaN above everything and ties in input order", function()
    for _, desc in ipairs { false, true } do
      local v, i = tide.tensor(rows):sort(2, desc)
      local ev, ep = ref_rows(rows, desc)
      same(v, ev, "values desc=" .. tostring(desc))
      same(i, ep, "indices desc=" .. tostring(desc))
      assert.are.equal("int64", i:dtype())
    end
    local v, i = tide.tensor(rows):sort()   -- the last dim by default
    H.equal(v, { { -5, 1, 1, 2, 3 }, { -1, -0.0, 0, 5, nan }, { -inf, 2, 2, inf, nan } })
    H.equal(i, { { 5, 2, 4, 3, 1 }, { 2, 4, 5, 3, 1 }, { 2, 3, 5, 1, 4 } })
    -- -0 keeps its sign in the values
    assert.are.equal(-inf, 1 / v:totable()[2][2])
  end)

  it("sorts along any dim, negative ones too, and takes PyTorch's keywords", function()
    local t = tide.tensor(rows)
    local v, i = t:sort(1)
    local cols = {}
    for c = 1, 5 do cols[c] = { rows[1][c], rows[2][c], rows[3][c] } end
    local cv, cp = ref_rows(cols, false)
    local ev, ep = {}, {}
    for r = 1, 3 do
      ev[r], ep[r] = {}, {}
      for c = 1, 5 do ev[r][c], ep[r][c] = cv[c][r], cp[c][r] end
    end
    same(v, ev)
    same(i, ep)
    local v2, i2 = t:sort(-2)
    same(v2, ev)
    same(i2, ep)
    local v3, i3 = tide.sort(t, { dim = 1, descending = true })
    local dv, dp = ref_rows(cols, true)
    for r = 1, 3 do for c = 1, 5 do ev[r][c], ep[r][c] = dv[c][r], dp[c][r] end end
    same(v3, ev)
    same(i3, ep)
  end)

  it("matches the reference on a long row with many ties, in every layout", function()
    local vals = {}
    for k, x in ipairs(H.values(600, 0, 10, 5)) do vals[k] = math.floor(x) end
    for _, desc in ipairs { false, true } do
      local base = tide.tensor(H.nest(vals, { 20, 30 }), "float64")
      for name, t in pairs(H.layouts(base)) do
        local got = H.flat(t:totable())
        local r = H.nest(got, { 20, 30 })
        local ev, ep = ref_rows(r, desc)
        local v, i = t:sort(2, desc)
        same(v, ev, name)
        same(i, ep, name)
      end
    end
    local long = tide.tensor(vals)
    local ev, ep = ref_sort(vals, true)
    local v, i = long:sort(1, true)
    same(v, ev)
    same(i, ep)
  end)

  it("sorts every dtype", function()
    local list = { 5, 0, 200, 7, 0, 3 }
    for _, dt in ipairs { "float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8" } do
      local v, i = tide.tensor(list, dt):sort()
      assert.are.equal(dt, v:dtype())
      H.equal(v, { 0, 0, 3, 5, 7, 200 }, dt)
      H.equal(i, { 2, 5, 6, 1, 4, 3 }, dt)
    end
    local s, si = tide.tensor({ -7, 3, -2147483648, 2147483647 }, "int32"):sort(1, true)
    H.equal(s, { 2147483647, 3, -7, -2147483648 })
    H.equal(si, { 4, 2, 1, 3 })
    local big = tide.tensor({ 2 ^ 62, -(2 ^ 62), 1, -1 }, "int64")
    H.equal(big:sort(), { -(2 ^ 62), -1, 1, 2 ^ 62 })
    local b, bi = tide.tensor({ true, false, true, false }):sort(1, true)
    H.equal(b, { true, true, false, false })
    H.equal(bi, { 1, 3, 2, 4 })
  end)

  it("handles 0-d, empty and single-element tensors", function()
    local v, i = tide.tensor(2.5):sort()
    assert.are.same({}, v:shape())
    H.equal(v, 2.5)
    H.equal(i, 1)
    local e, ei = tide.zeros(3, 0):sort(2)
    assert.are.same({ 3, 0 }, e:shape())
    assert.are.same({ 3, 0 }, ei:shape())
    local e2 = tide.zeros(0, 4):sort(2)
    assert.are.same({ 0, 4 }, e2:shape())
    local one, oi = tide.tensor({ { 4 }, { 3 } }):sort(2)
    H.equal(one, { { 4 }, { 3 } })
    H.equal(oi, { { 1 }, { 1 } })
  end)

  it("argsort and msort", function()
    local t = tide.tensor(rows)
    local _, ep = ref_rows(rows, true)
    same(t:argsort(2, true), ep)
    same(tide.argsort(t, 2, true), ep)
    H.equal(tide.tensor({ { 3, 1 }, { 1, 2 } }):msort(), { { 1, 1 }, { 3, 2 } })
  end)

  it("passes the gradient back to where each value came from", function()
    local x = tide.tensor({ { 0.3, -1.2, 0.8 }, { 2, 0.1, -0.4 } }, "float64"):requires_grad_()
    assert.is_true(tide.autograd.gradcheck(function(a)
      local v = a:sort(2, true)
      local w = a:sort(1)
      return v * tide.tensor({ 1, 2, 3 }, "float64") + w
    end, { x }))
    local y = x:detach():requires_grad_()
    local v = y:sort(2)
    v:select(2, 1):sum():backward()   -- the smallest of each row
    H.equal(y.grad, { { 0, 1, 0 }, { 0, 0, 1 } })
  end)

  it("is captured by jit.compile", function()
    local f = tide.jit.compile(function(a) local v, i = a:sort(2, true); return v * 2, i end)
    local x = tide.tensor(rows)
    local ev, ep = x:sort(2, true)
    for _ = 1, 3 do
      local v, i = f(x)
      H.equal(v, (ev * 2):totable())
      H.equal(i, ep:totable())
    end
  end)

  it("rejects bad arguments", function()
    local t = tide.tensor(rows)
    assert.has_error(function() t:sort(3) end)
    assert.has_error(function() t:sort(2, "yes") end, "sort: descending must be a boolean, got string")
    assert.has_error(function() t:sort("x") end, "sort: dim must be a number, got string")
  end)
end)

describe("topk", function()
  local rows = { { 3, 1, 2, 1, -5, 4 }, { nan, -1, 5, -0.0, 0, 5 } }

  it("takes the k largest or smallest of each row, in order", function()
    for _, largest in ipairs { true, false } do
      for k = 0, 6 do
        local v, i = tide.tensor(rows):topk(k, 2, largest)
        local ev, ep = ref_rows(rows, largest, k)
        assert.are.same({ 2, k }, v:shape())
        if k > 0 then
          same(v, ev, "k=" .. k)
          same(i, ep, "k=" .. k)
        end
      end
    end
    local v, i = tide.topk(tide.tensor(rows), 2)   -- largest along the last dim by default
    H.equal(v, { { 4, 3 }, { nan, 5 } })
    H.equal(i, { { 6, 1 }, { 1, 3 } })
    local v2 = tide.tensor(rows):topk(1, { dim = 1, largest = false })
    H.equal(v2, { { 3, -1, 2, -0.0, -5, 4 } })
  end)

  it("agrees with sort on long rows, where it keeps only k in a buffer", function()
    local vals = {}
    for k, x in ipairs(H.values(3000, -50, 50, 9)) do vals[k] = math.floor(x) end
    vals[17], vals[2000] = nan, nan
    local t = tide.tensor(H.nest(vals, { 2, 1500 }))
    for _, largest in ipairs { true, false } do
      for _, k in ipairs { 1, 5, 64, 65, 200 } do
        local v, i = t:topk(k, 2, largest)
        local sv, si = t:sort(2, largest)
        H.equal(v, sv:narrow(2, 1, k), "k=" .. k)
        H.equal(i, si:narrow(2, 1, k), "k=" .. k)
      end
    end
    -- along the first dim of a transposed view
    local v, i = t:t():topk(3, 1)
    local sv, si = t:sort(2, true)
    H.equal(v, sv:narrow(2, 1, 3):t())
    H.equal(i, si:narrow(2, 1, 3):t())
  end)

  it("handles 0-d and empty tensors", function()
    local v, i = tide.tensor(7):topk(1)
    H.equal(v, 7)
    H.equal(i, 1)
    assert.has_error(function() tide.tensor(7):topk(0) end,
      "topk: k = 0 is out of range for a 0-d tensor (k must be 1)")
    local e, ei = tide.tensor({ { 1, 2 } }):topk(0)
    assert.are.same({ 1, 0 }, e:shape())
    assert.are.same({ 1, 0 }, ei:shape())
    local z = tide.zeros(0, 3):topk(2)
    assert.are.same({ 0, 2 }, z:shape())
  end)

  it("passes the gradient to the chosen elements", function()
    local x = tide.tensor({ { 0.3, -1.2, 0.8, 0.5 }, { 2, 0.1, -0.4, 1.5 } }, "float64"):requires_grad_()
    assert.is_true(tide.autograd.gradcheck(function(a) return (a:topk(2, 2)) end, { x }))
    local y = x:detach():requires_grad_()
    local v = y:topk(2, 2, false)
    v:sum():backward()
    H.equal(y.grad, { { 1, 1, 0, 0 }, { 0, 1, 1, 0 } })
  end)

  it("rejects a k out of range and bad arguments", function()
    local t = tide.tensor(rows)
    assert.has_error(function() t:topk(7) end, "topk: k = 7 is out of range for dimension 2 of size 6")
    assert.has_error(function() t:topk(-1, 1) end, "topk: k = -1 is out of range for dimension 1 of size 2")
    assert.has_error(function() t:topk(1.5) end, "topk: k must be an integer, got 1.5")
    assert.has_error(function() t:topk(1, 2, 1) end, "topk: largest must be a boolean, got number")
  end)
end)

describe("order statistics", function()
  local x = tide.tensor({ { 3, 1, 2, nan, 7 }, { 4, 1, 1, 2, -3 }, { nan, nan, 5, nan, nan } })

  it("kthvalue: the k-th smallest and its index", function()
    local v, i = x:kthvalue(2, 2)
    H.equal(v, { 2, 1, nan })
    H.equal(i, { 3, 2, 1 })
    local v1, i1 = tide.kthvalue(x, 1, 1, true)
    H.equal(v1, { { 3, 1, 1, 2, -3 } })
    H.equal(i1, { { 1, 1, 2, 2, 2 } })
    H.equal(tide.tensor(4):kthvalue(1), 4)
    assert.has_error(function() x:kthvalue(6) end, "kthvalue: k = 6 is out of range for a dimension of size 5")
    assert.has_error(function() x:kthvalue(0, 1) end, "kthvalue: k = 0 is out of range for a dimension of size 3")
  end)

  it("median: the lower median, NaN wherever a NaN is; nanmedian skips them", function()
    local v, i = x:median(2)
    H.equal(v, { nan, 1, nan })
    H.equal(i, { 4, 3, 1 })   -- a NaN's index is the first NaN's
    local nv, ni = x:nanmedian(2)
    H.equal(nv, { 2, 1, 5 })
    H.equal(ni, { 3, 3, 3 })
    local kv, ki = tide.tensor({ { 5, 1, 4, 2 } }):median(2, true)
    H.equal(kv, { { 2 } })
    H.equal(ki, { { 4 } })
    H.equal(tide.tensor({ 5, 1, 4, 2, 9 }):median(), 4)
    H.equal(x:median(), nan)
    H.equal(x:nanmedian(), 2)   -- of 3 1 2 7 4 1 1 2 -3 5
    assert.has_error(function() tide.zeros(2, 0):median(2) end,
      "median: cannot take the median of dimension 2, of size 0")
    -- the gradient goes to the median's place
    local t = tide.tensor({ { 0.5, -1, 2 } }, "float64"):requires_grad_()
    t:median(2):sum():backward()
    H.equal(t.grad, { { 1, 0, 0 } })
  end)

  it("quantile and nanquantile with every interpolation", function()
    local v = tide.tensor({ 1, 2, 3, 4, 5 }, "float64")
    H.close(v:quantile({ 0, 0.25, 0.5, 0.9, 1 }), { 1, 2, 3, 4.6, 5 }, 1e-15)
    local q = 0.4   -- rank 1.6 among 5
    local want = { linear = 2.6, lower = 2, higher = 3, nearest = 3, midpoint = 2.5 }
    for how, e in pairs(want) do
      H.close(v:quantile(q, nil, nil, { interpolation = how }), e, 1e-15, 0, how)
    end
    -- nearest rounds half to even, as PyTorch: rank 1.5 -> 2, rank 2.5 -> 2
    local six = tide.tensor({ 10, 20, 30, 40 }, "float64")
    H.equal(six:quantile(0.5, nil, nil, { interpolation = "nearest" }), 30)
    local m = tide.tensor({ { 1, 3, 2, 4 }, { 10, nan, 30, 20 } }, "float64")
    H.close(m:quantile(0.5, 2), { 2.5, nan }, 1e-15)
    H.close(m:nanquantile(0.5, 2), { 2.5, 20 }, 1e-15)
    H.close(m:nanquantile({ 0.25, 1 }, 2, true), { { { 1.75 }, { 15 } }, { { 4 }, { 30 } } }, 1e-15)
    H.close(tide.nanquantile(tide.tensor({ nan, nan }), 0.5), nan)
    assert.has_error(function() v:quantile(1.5) end, "quantile: q must be in [0, 1], got 1.5")
    assert.has_error(function() v:quantile(0.5, nil, nil, { interpolation = "cubic" }) end,
      "quantile: interpolation must be 'linear', 'lower', 'higher', 'nearest' or 'midpoint', got cubic")
    assert.has_error(function() tide.tensor({ 1, 2 }, "int64"):quantile(0.5) end,
      "quantile: input must be a floating-point tensor, got int64")
  end)

  it("unique and unique_consecutive, with inverse and counts", function()
    local t = tide.tensor({ { 3, 1, 3 }, { 2, 1, 1 } }, "int64")
    local u, inv, cnt = t:unique({ return_inverse = true, return_counts = true })
    H.equal(u, { 1, 2, 3 })
    H.equal(inv, { { 3, 1, 3 }, { 2, 1, 1 } })
    H.equal(cnt, { 3, 1, 2 })
    H.equal(tide.unique(tide.tensor({ 2.5, nan, 2.5, nan })), { 2.5, nan, nan })   -- each NaN distinct
    local c, ccnt = tide.unique_consecutive(tide.tensor({ 3, 3, 1, 1, 3, 2 }), { return_counts = true })
    H.equal(c, { 3, 1, 3, 2 })
    H.equal(ccnt, { 2, 2, 1, 1 })
    local e, einv, ecnt = tide.unique(tide.zeros(0), { return_inverse = true, return_counts = true })
    assert.are.same({ 0 }, e:shape())
    assert.are.same({ 0 }, einv:shape())
    assert.are.same({ 0 }, ecnt:shape())
    H.equal(tide.unique(tide.tensor({ true, false, true })), { false, true })
    assert.has_error(function() t:unique({ dim = 1 }) end,
      "unique: the dim option is not supported; unique works on all elements")
  end)
end)

describe("searchsorted and bucketize", function()
  -- the 1-based insertion index of v in the sorted list (NaN last)
  local function ref(list, v, right)
    local function below(a, b) return a < b or (a == a and b ~= b) end
    for i, e in ipairs(list) do
      if right then
        if below(v, e) then return i end
      elseif not below(e, v) then
        return i
      end
    end
    return #list + 1
  end

  local seq = { -3, -1, -1, 0, 2, 2, 2, 5, 8, nan }
  local vals = { -5, -3, -1, 0, 1, 2, 3, 8, 9, inf, -inf, nan, -0.0 }

  it("finds each value's place on either side, NaN last", function()
    for _, right in ipairs { false, true } do
      local want = {}
      for k, v in ipairs(vals) do want[k] = ref(seq, v, right) end
      local got = tide.searchsorted(tide.tensor(seq), tide.tensor(vals), { right = right })
      assert.are.equal("int64", got:dtype())
      H.equal(got, want, "right=" .. tostring(right))
      H.equal(tide.bucketize(tide.tensor(vals), tide.tensor(seq), { right = right }), want)
      H.equal(tide.tensor(vals, "float64"):bucketize(tide.tensor(seq), { side = right and "right" or "left" }), want)
    end
    H.equal(tide.searchsorted(tide.tensor({ 1, 3, 5 }), 4), 3)   -- a number: a 0-d result
  end)

  it("searches each row of an n-d sequence, in every layout", function()
    local s = tide.tensor({ { 1, 3, 5, 7 }, { 2, 2, 4, 6 }, { -1, 0, 0, 9 } })
    local v = tide.tensor({ { 0, 5, 8 }, { 2, 3, 7 }, { 0, 10, -1 } })
    local want = {}
    local sl, vl = s:totable(), v:totable()
    for r = 1, 3 do
      want[r] = {}
      for k = 1, 3 do want[r][k] = ref(sl[r], vl[r][k], false) end
    end
    for sname, st in pairs(H.layouts(s)) do
      for vname, vt in pairs(H.layouts(v)) do
        H.equal(tide.searchsorted(st, vt), want, sname .. "/" .. vname)
      end
    end
  end)

  it("compares in the promoted dtype", function()
    local s = tide.tensor({ 1, 2, 3 }, "int64")
    H.equal(tide.searchsorted(s, tide.tensor({ 1.5, 2, 2.5 })), { 2, 2, 3 })
    H.equal(tide.searchsorted(s, tide.tensor({ 1.5, 2, 2.5 }), { right = true }), { 2, 3, 3 })
    H.equal(tide.searchsorted(tide.tensor({ 10, 200 }, "uint8"), tide.tensor({ 5, 100, 250 }, "uint8")), { 1, 2, 3 })
  end)

  it("handles empty values and an empty sequence", function()
    assert.are.same({ 0 }, tide.searchsorted(tide.tensor({ 1, 2 }), tide.zeros(0)):shape())
    H.equal(tide.searchsorted(tide.zeros(0), tide.tensor({ 1, 2 })), { 1, 1 })
    assert.are.same({ 2, 0 }, tide.searchsorted(tide.zeros(2, 3), tide.zeros(2, 0)):shape())
  end)

  it("is captured by jit.compile", function()
    local s = tide.tensor({ 1, 3, 5 })
    local f = tide.jit.compile(function(v) return tide.searchsorted(s, v * 2) end)
    for _ = 1, 3 do H.equal(f(tide.tensor({ 0.4, 1.5, 2 })), { 1, 2, 3 }) end
  end)

  it("rejects bad arguments", function()
    local s2 = tide.tensor({ { 1, 2 }, { 3, 4 } })
    assert.has_error(function() tide.searchsorted(s2, tide.tensor({ 1, 2 })) end,
      "searchsorted: a sorted sequence of shape [2,2] takes values with the same leading dimensions, got [2]")
    assert.has_error(function() tide.searchsorted(s2, tide.zeros(3, 1)) end,
      "searchsorted: a sorted sequence of shape [2,2] takes values with the same leading dimensions, got [3,1]")
    assert.has_error(function() tide.searchsorted(tide.tensor(1), tide.tensor({ 1 })) end,
      "searchsorted: the sorted sequence must have a dimension, got a 0-d tensor")
    assert.has_error(function() tide.searchsorted({ 1, 2 }, 1) end,
      "searchsorted: the sorted sequence must be a tensor, got table")
    assert.has_error(function() tide.searchsorted(tide.tensor({ 1 }), 1, { right = true, side = "left" }) end,
      "searchsorted: side 'left' contradicts right = true")
    assert.has_error(function() tide.searchsorted(tide.tensor({ 1 }), 1, { side = "middle" }) end,
      "searchsorted: side must be 'left' or 'right', got middle")
    assert.has_error(function() tide.bucketize(tide.tensor({ 1 }), s2) end,
      "bucketize: boundaries must be 1-d, got a 2-d tensor")
    assert.has_error(function() tide.searchsorted(tide.tensor({ true }), tide.tensor({ true })) end,
      "searchsorted: dtype bool is not supported")
  end)
end)
