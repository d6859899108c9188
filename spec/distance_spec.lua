-- tide.cdist and tide.pdist against plain-Lua float64 references for
-- p = 0, 1, 2, 3 and inf, 2-d and batched (broadcast) input, both ways of
-- computing p = 2 (difference and matrix-product expansion), zero gradients
-- where distances are 0, gradcheck, tide.jit.compile against eager, and the
-- errors of bad input.
local tide = require "tide"
local H = require "spec.helpers"
local gradcheck = tide.autograd.gradcheck

local seed = 97
local function rnd(shape, grad)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local t = tide.tensor(H.nest(H.values(n, -1, 1, seed), shape), "float64")
  seed = seed + 7919
  if grad then t:requires_grad_() end
  return t
end

local function dist(a, b, p)
  local s = 0
  for k = 1, #a do
    local d = math.abs(a[k] - b[k])
    if p == 0 then s = s + (d ~= 0 and 1 or 0)
    elseif p == math.huge then s = math.max(s, d)
    else s = s + d ^ p end
  end
  if p == 0 or p == math.huge then return s end
  return s ^ (1 / p)
end

-- [P][M] x [R][M] -> [P][R]
local function cdist_ref(A, B, p)
  local r = {}
  for i = 1, #A do
    r[i] = {}
    for j = 1, #B do r[i][j] = dist(A[i], B[j], p) end
  end
  return r
end

describe("tide.cdist", function()
  it("matches a plain-Lua reference for p = 0, 1, 2, 3 and inf", function()
    local a, b = rnd { 4, 3 }, rnd { 5, 3 }
    b[{ 2 }] = a[{ 3 }]   -- a zero distance
    for _, p in ipairs { 0, 1, 2, 3, 0.5, math.huge } do
      H.close(tide.cdist(a, b, p), cdist_ref(a:totable(), b:totable(), p), 1e-12, 1e-12, "p = " .. p)
    end
    H.close(a:cdist(b), cdist_ref(a:totable(), b:totable(), 2), 1e-12, 1e-12)
    assert.are.equal(0, tide.cdist(a, b)[{ 3, 2 }]:item())
    local f = tide.cdist(a:float(), b:float())
    assert.are.equal("float32", f:dtype())
    H.close(f, cdist_ref(a:totable(), b:totable(), 2), 1e-5, 1e-5)
  end)

  it("works batched, broadcasting the batch dimensions", function()
    local a, b = rnd { 2, 3, 4 }, rnd { 1, 2, 4 }
    for _, p in ipairs { 1, 2 } do
      local d = tide.cdist(a, b, p)
      assert.are.same({ 2, 3, 2 }, d:shape())
      for n = 1, 2 do
        H.close(d:select(1, n), cdist_ref(a:select(1, n):totable(), b:select(1, 1):totable(), p), 1e-12, 1e-12)
      end
    end
    assert.are.same({ 0, 3 }, tide.cdist(tide.zeros(0, 2, "float64"), rnd { 3, 2 }):shape())
  end)

  it("uses the matrix-product expansion for more than 25 rows, within float tolerance", function()
    local a, b = rnd { 30, 5 }, rnd { 7, 5 }
    b[{ 4 }] = a[{ 11 }]
    local ref = cdist_ref(a:totable(), b:totable(), 2)
    H.close(tide.cdist(a, b), ref, 1e-10, 1e-7)
    H.close(tide.cdist(a, b, 2, "donot_use_mm_for_euclid_dist"), ref, 1e-12, 1e-12)
    H.close(tide.cdist(a:narrow(1, 1, 4), b, 2, "use_mm_for_euclid_dist"),
      cdist_ref(a:narrow(1, 1, 4):totable(), b:totable(), 2), 1e-10, 1e-7)
    local f = tide.cdist(a:float(), b:float())
    H.close(f, ref, 1e-4, 2e-3)
    assert.is_true(f:ge(0):all():item())
  end)

  it("gives a zero gradient where a distance is 0, and gradchecks elsewhere", function()
    for _, mode in ipairs { "donot_use_mm_for_euclid_dist", "use_mm_for_euclid_dist" } do
      local a = tide.tensor({ { 1, 2 }, { 0.5, -1 } }, "float64"):requires_grad_()
      local b = tide.tensor({ { 1, 2 }, { 3, 1 } }, "float64"):requires_grad_()
      tide.cdist(a, b, 2, mode):select(2, 1):select(1, 1):backward()   -- d(a1, b1) = 0
      H.equal(a.grad, { { 0, 0 }, { 0, 0 } }, mode)
      H.equal(b.grad, { { 0, 0 }, { 0, 0 } }, mode)
      local c = tide.tensor({ { 1, 2 }, { 0.5, -1 } }, "float64"):requires_grad_()
      tide.cdist(c, c, 2, mode):sum():backward()
      assert.is_true(c.grad:isfinite():all():item(), mode)
    end
    local a, b = rnd({ 3, 4 }, true), rnd({ 2, 4 }, true)
    for _, p in ipairs { 1, 2, 3, math.huge } do
      assert.is_true(gradcheck(function(x, y) return tide.cdist(x, y, p) end, { a, b }), "p = " .. p)
    end
    assert.is_true(gradcheck(function(x, y) return tide.cdist(x, y, 2, "use_mm_for_euclid_dist") end, { a, b }))
    assert.is_true(gradcheck(function(x, y) return tide.cdist(x, y) end,
      { rnd({ 2, 2, 3 }, true), rnd({ 2, 3, 3 }, true) }))
  end)

  it("gives the eager results under tide.jit.compile", function()
    local f = tide.jit.compile(function(x, y) return tide.cdist(x, y), tide.pdist(x, 3) end)
    local a, b = rnd { 4, 3 }, rnd { 5, 3 }
    local d, pd = tide.cdist(a, b), tide.pdist(a, 3)
    for _ = 1, 3 do
      local d2, pd2 = f(a, b)
      H.close(d2, d, 1e-12)
      H.close(pd2, pd, 1e-12)
    end
    local a2 = rnd { 4, 3 }
    H.close(f(a2, b), tide.cdist(a2, b), 1e-12)
  end)

  it("raises clear errors", function()
    assert.has_error(function() tide.cdist(tide.ones(2, 3, "int64"), tide.ones(2, 3)) end,
      "cdist: only floating-point tensors are supported, x1 is int64")
    assert.has_error(function() tide.cdist(tide.ones(3), tide.ones(2, 3)) end,
      "cdist: x1 and x2 must have at least 2 dimensions, got shapes [3] and [2,3]")
    assert.has_error(function() tide.cdist(tide.ones(2, 3), tide.ones(2, 4)) end,
      "cdist: x1 [2,3] and x2 [2,4] must have the same number of columns (3 ~= 4)")
    assert.has_error(function() tide.cdist(tide.ones(2, 3), tide.ones(2, 3), -1) end,
      "cdist: p must be a non-negative number, got -1")
    assert.has_error(function() tide.cdist(tide.ones(2, 3), tide.ones(2, 3), 2, "fast") end,
      "cdist: compute_mode must be 'use_mm_for_euclid_dist_if_necessary', 'use_mm_for_euclid_dist' or " ..
      "'donot_use_mm_for_euclid_dist', got fast")
    assert.has_error(function() tide.cdist(tide.ones(2, 3), nil) end, "cdist: x2 must be a tensor, got nil")
  end)
end)

describe("tide.pdist", function()
  it("gives the distances of the pairs i < j in row-major order", function()
    local x = rnd { 4, 3 }
    x[{ 4 }] = x[{ 2 }]
    local X = x:totable()
    for _, p in ipairs { 0, 1, 2, 3, math.huge } do
      local ref = {}
      for i = 1, 4 do
        for j = i + 1, 4 do ref[#ref + 1] = dist(X[i], X[j], p) end
      end
      H.close(tide.pdist(x, p), ref, 1e-12, 1e-12, "p = " .. p)
    end
    assert.are.same({ 0 }, tide.pdist(rnd { 1, 3 }):shape())
    assert.are.same({ 0 }, tide.pdist(tide.zeros(0, 3, "float64")):shape())
    assert.are.same({ 6 }, x:pdist():shape())
  end)

  it("gradchecks, with a zero gradient where two rows agree", function()
    assert.is_true(gradcheck(function(a) return tide.pdist(a) end, { rnd({ 4, 3 }, true) }))
    assert.is_true(gradcheck(function(a) return tide.pdist(a, 3) end, { rnd({ 3, 2 }, true) }))
    local a = tide.tensor({ { 1, 2 }, { 1, 2 }, { 0, 0 } }, "float64"):requires_grad_()
    tide.pdist(a):select(1, 1):backward()
    H.equal(a.grad, { { 0, 0 }, { 0, 0 }, { 0, 0 } })
  end)

  it("raises clear errors", function()
    assert.has_error(function() tide.pdist(tide.ones(2, 2, 2)) end,
      "pdist: input must be 2-d [N, M], got shape [2,2,2]")
    assert.has_error(function() tide.pdist(tide.ones(2, 2, "int32")) end,
      "pdist: only floating-point tensors are supported, input is int32")
    assert.has_error(function() tide.pdist(tide.ones(2, 2), -2) end, "pdist: p must be a non-negative number, got -2")
  end)
end)
