--- linalg decompositions and solvers: solve, solve_triangular, inv, det, slogdet,
-- logdet, cholesky (and cholesky_solve, cholesky_inverse), eigh, eigvalsh, qr,
-- svd, svdvals, pinv, matrix_rank, lstsq, matrix_power, multi_dot, cond and the
-- spectral norms, against float64 references in plain Lua (spec/helpers/
-- linalg_ref.lua) and the defining properties, including the sign conventions;
-- float32 and float64, non-contiguous and broadcast inputs, empty and 1x1
-- matrices, every error message, gradients by finite differences and a replay.
local tide = require "tide"
local H = require "spec.helpers"
local R = require "spec.helpers.linalg_ref"

local linalg = tide.linalg
local grad, gradcheck = tide.autograd.grad, tide.autograd.gradcheck

-- -- inputs ------------------------------------------------------------------------------

local seed = 4242

--- a Lua m x n matrix of values in [lo, hi)
local function rmat(m, n, lo, hi)
  seed = seed + 1
  local v = H.values(m * n, lo or -1, hi or 1, seed)
  local A = {}
  for i = 1, m do
    A[i] = {}
    for j = 1, n do A[i][j] = v[(i - 1) * n + j] end
  end
  return A
end

--- a random orthogonal n x n matrix
local function orth(n) return (R.qr(rmat(n, n))) end

--- U diag(s) V^T (m x n) for random orthogonal U, V: known singular values
local function with_svals(m, n, s)
  local U, V = orth(m), orth(n)
  local D = R.zeros(m, n)
  for i = 1, #s do D[i][i] = s[i] end
  return R.mm(R.mm(U, D), R.t(V))
end

--- Q diag(w) Q^T, exactly symmetric: known eigenvalues
local function with_eigs(w)
  local n = #w
  local D = R.zeros(n, n)
  for i = 1, n do D[i][i] = w[i] end
  local Q = orth(n)
  local A = R.mm(R.mm(Q, D), R.t(Q))
  for i = 1, n do for j = i + 1, n do A[i][j] = A[j][i] end end
  return A
end

--- an n x n matrix with singular values in [1, 3]: well conditioned, and its
-- LU factorisation swaps rows
local function general(n)
  local s = {}
  for i = 1, n do s[i] = 1 + 2 * (i - 1) / math.max(n - 1, 1) end
  return with_svals(n, n, s)
end

--- X X^T + n I for a random X: symmetric positive-definite
local function spd(n)
  local X = rmat(n, n)
  return R.add(R.mm(X, R.t(X)), R.eye(n), n)
end

local numel = H.numel

--- the tensor [batch..., m, n] of the matrices in list (batch row-major)
local function tensor_of(list, batch, dtype)
  local m, n = #list[1], #list[1][1]
  local vals = {}
  for _, A in ipairs(list) do
    for i = 1, m do for j = 1, n do vals[#vals + 1] = A[i][j] end end
  end
  local shape = { unpack(batch or {}) }
  shape[#shape + 1], shape[#shape + 2] = m, n
  return tide.tensor(H.nest(vals, shape), "float64"):to(dtype or "float64")
end

--- the tensor [batch..., m, n] of matrices made by make()
local function batch_of(batch, make, dtype)
  local list = {}
  for b = 1, numel(batch) do list[b] = make(b) end
  return tensor_of(list, batch, dtype)
end

--- the matrices of t [..., m, n] as Lua tables, its batch row-major
local function mats(t)
  local s = t:shape()
  local m, n = s[#s - 1], s[#s]
  local flat = H.flat(t:totable())
  local list = {}
  for b = 0, #flat / (m * n) - 1 do
    local A = {}
    for i = 1, m do
      A[i] = {}
      for j = 1, n do A[i][j] = flat[b * m * n + (i - 1) * n + j] end
    end
    list[#list + 1] = A
  end
  return list
end

--- the vectors of t [..., n] as Lua tables
local function vecs(t)
  local s = t:shape()
  local n = s[#s]
  local flat = H.flat(t:totable())
  local list = {}
  for b = 0, #flat / n - 1 do
    local v = {}
    for i = 1, n do v[i] = flat[b * n + i] end
    list[#list + 1] = v
  end
  return list
end

--- t's batch dims (all but the last two)
local function batch_dims(t)
  local s = t:shape()
  s[#s], s[#s - 1] = nil, nil
  return s
end

--- t expanded to the batch dims `batch`, its matrix dims kept
local function expand_batch(t, batch)
  local s = t:shape()
  local full = { unpack(batch) }
  full[#full + 1], full[#full + 2] = s[#s - 1], s[#s]
  return t:expand(full)
end

--- The same values as t [..., m, n] in four layouts: contiguous, column-major
-- matrices (a transposed view), every other column of a wider tensor, and a
-- corner of a larger tensor (narrowed twice).
local function layouts(t)
  local d = t:dim()
  local r = { contiguous = t:clone(), strided = H.layouts(t).strided }
  r.transposed = t:transpose(d - 1, d):contiguous():transpose(d - 1, d)
  local s = t:shape()
  local big = { unpack(s) }
  big[d - 1], big[d] = s[d - 1] + 2, s[d] + 3
  r.narrowed = tide.zeros(big, t:dtype()):narrow(d - 1, 2, s[d - 1]):narrow(d, 3, s[d])
  r.narrowed:copy_(t)
  for name, v in pairs(r) do
    assert(name == "contiguous" or not v:is_contiguous(), name .. " should not be contiguous")
  end
  return r
end

local tol = { float32 = 3e-5, float64 = 1e-11 }

--- the message of the error fn raises, without the "file:line: " that points at
-- the caller. On a device (the suite run with TIDE_DEFAULT_DEVICE=cuda:0) a
-- factorisation's failure reaches :totable() through the copy to the host, which
-- wraps it: "copy: an input comes from a failed op: MSG (on cuda:0) (op ...)";
-- MSG alone is returned.
local function message(fn)
  local ok, err = pcall(fn)
  assert(not ok, "expected an error, got none")
  -- the device's name may stand before or after the op's suffix, and a failure
  -- met by the copy to the host has the copy's suffix after the op's
  err = tostring(err):gsub("^[^\n]-:%d+: ", "", 1):gsub(" %(on cuda:%d+%)", ""):gsub("%s+$", "")
  err = err:gsub("^copy: an input comes from a failed op: ", "", 1)
  local n
  repeat err, n = err:gsub(" %(op [^()]*%)$", "") until n == 0
  return err
end

--- asserts that fn raises an error that contains each of the strings given
local function raises_with(fn, ...)
  local err = message(fn)
  for _, s in ipairs { ... } do
    assert(err:find(s, 1, true), string.format("error %q does not name %q", err, s))
  end
end

local function leaf(t) return t:double():contiguous():requires_grad_() end

-- -- checks on results ----------------------------------------------------------------------

--- A = Q R with Q's columns orthonormal, R upper triangular, both as the
-- Householder reference signs them; mode "reduced", "complete" or "r"
local function check_qr(A, Q, Rt, mode, dtype, what)
  local s = A:shape()
  local m, n = s[#s - 1], s[#s]
  local k = mode == "complete" and m or math.min(m, n)
  local batch = batch_dims(A)
  local rshape, qshape = { unpack(batch) }, { unpack(batch) }
  rshape[#rshape + 1], rshape[#rshape + 2] = k, n
  qshape[#qshape + 1], qshape[#qshape + 2] = m, k
  if mode == "r" then qshape = { 0 } end
  assert.are.same(rshape, Rt:shape(), what .. " R's shape")
  assert.are.same(qshape, Q:shape(), what .. " Q's shape")
  assert.are.equal(dtype, Rt:dtype(), what .. " R's dtype")
  if numel(rshape) == 0 then return end
  local As, Rs, Qs = mats(A), mats(Rt), mode ~= "r" and mats(Q) or nil
  for b, Ab in ipairs(As) do
    local w = what .. " batch " .. b
    local Qf, Rf = R.qr(Ab)
    local Rk = {}
    for i = 1, k do Rk[i] = Rf[i] end
    R.check_triangular(Rs[b], false, w .. " R")
    R.near(Rs[b], Rk, tol[dtype], w .. " R")
    if Qs then
      local Qk = {}
      for i = 1, m do Qk[i] = { unpack(Qf[i], 1, k) } end
      R.near(Qs[b], Qk, tol[dtype], w .. " Q")
      R.check_orthonormal(Qs[b], tol[dtype], w)
      R.near(R.mm(Qs[b], Rs[b]), Ab, tol[dtype], w .. " Q R")
    end
  end
end

--- A = U diag(S) Vh with S descending, non-negative and equal to the reference's,
-- U and Vh orthonormal, U's columns signed by the convention
local function check_svd(A, U, S, Vh, full, dtype, what)
  local s = A:shape()
  local m, n = s[#s - 1], s[#s]
  local k = math.min(m, n)
  local batch = batch_dims(A)
  local function shape(...)
    local r = { unpack(batch) }
    for _, v in ipairs { ... } do r[#r + 1] = v end
    return r
  end
  assert.are.same(shape(m, full and m or k), U:shape(), what .. " U's shape")
  assert.are.same(shape(k), S:shape(), what .. " S's shape")
  assert.are.same(shape(full and n or k, n), Vh:shape(), what .. " Vh's shape")
  assert.are.equal(dtype, S:dtype(), what .. " S's dtype")
  local As, Ss = k > 0 and mats(A) or {}, k > 0 and vecs(S) or {}
  local Us, Vhs = m > 0 and (full or k > 0) and mats(U) or {}, n > 0 and (full or k > 0) and mats(Vh) or {}
  for b = 1, numel(batch) do
    local w, Ab = what .. " batch " .. b, As[b]
    if k > 0 then
      R.check_sorted(Ss[b], true, w .. " S")
      assert(Ss[b][k] >= 0, w .. ": a negative singular value")
      R.near(Ss[b], R.svdvals(Ab), tol[dtype], w .. " S")
    end
    if Us[b] then
      R.check_orthonormal(Us[b], tol[dtype], w .. " U")
      R.check_signs(Us[b], w .. " U")
    end
    if Vhs[b] then R.check_orthonormal(R.t(Vhs[b]), tol[dtype], w .. " Vh^T") end
    if k > 0 then
      local Uk, Vk = {}, {}
      for i = 1, m do Uk[i] = { unpack(Us[b][i], 1, k) } end
      for i = 1, k do Vk[i] = Vhs[b][i] end
      R.near(R.mm(R.mdiag(Uk, Ss[b]), Vk), Ab, tol[dtype], w .. " U diag(S) Vh")
    end
  end
end

--- A V = V diag(w), w ascending and equal to the reference's, V orthonormal and
-- signed by the convention; Asym is the symmetric matrix A stands for
local function check_eigh(Asym, w, V, dtype, what)
  local s = Asym:shape()
  local n = s[#s]
  local wshape = batch_dims(Asym)
  wshape[#wshape + 1] = n
  assert.are.same(wshape, w:shape(), what .. " eigenvalues' shape")
  assert.are.same(s, V:shape(), what .. " eigenvectors' shape")
  assert.are.equal(dtype, w:dtype(), what .. " dtype")
  if numel(s) == 0 then return end
  local Vs, ws = mats(V), vecs(w)
  for b, Ab in ipairs(mats(Asym)) do
    local wh = what .. " batch " .. b
    R.check_sorted(ws[b], false, wh .. " eigenvalues")
    R.near(ws[b], R.eigvalsh(Ab), tol[dtype], wh .. " eigenvalues")
    R.check_orthonormal(Vs[b], tol[dtype], wh .. " V")
    R.near(R.mm(Ab, Vs[b]), R.mdiag(Vs[b], ws[b]), tol[dtype], wh .. " A V - V diag(w)")
    R.check_signs(Vs[b], wh .. " V")
  end
end

-- -- specs -------------------------------------------------------------------------------

describe("tide.linalg decompositions", function()
  describe("solve", function()
    it("solves hand-checked systems", function()
      local A = tide.tensor { { 3, 1 }, { 1, 2 } }
      H.close(linalg.solve(A, tide.tensor { { 9 }, { 8 } }), { { 2 }, { 3 } }, 1e-6, 1e-6)
      H.close(linalg.solve(A, tide.tensor { 9, 8 }), { 2, 3 }, 1e-6, 1e-6)
      -- X A = B: [2, 3] A = [9, 8]
      H.close(linalg.solve(A, tide.tensor { { 9, 8 } }, { left = false }), { { 2, 3 } }, 1e-6, 1e-6)
      H.close(linalg.solve(tide.tensor { { 4 } }, tide.tensor { { 2, -6 } }), { { 0.5, -1.5 } }, 1e-7)
      -- the first row's pivot is 0: LU must swap rows
      H.close(linalg.solve(tide.tensor { { 0, 1 }, { 1, 0 } }, tide.tensor { 5, 7 }), { 7, 5 }, 0, 1e-7)
      -- integers are promoted to float32
      local X = linalg.solve(tide.tensor({ { 3, 1 }, { 1, 2 } }, "int64"), tide.tensor({ { 9 }, { 8 } }, "int32"))
      assert.are.equal("float32", X:dtype())
      H.close(X, { { 2 }, { 3 } }, 1e-6, 1e-6)
    end)

    for _, dtype in ipairs { "float32", "float64" } do
      it("matches Gaussian elimination in " .. dtype .. " in every layout, left and right", function()
        local A = tensor_of({ general(5) }, {}, dtype)
        local B = tensor_of({ rmat(5, 3) }, {}, dtype)
        local Bt = tensor_of({ rmat(3, 5) }, {}, dtype)
        local Am = mats(A)[1]
        local want = R.solve(Am, mats(B)[1])
        local want_right = R.t(R.solve(R.t(Am), R.t(mats(Bt)[1])))   -- X A = B: A^T X^T = B^T
        for na, la in pairs(layouts(A)) do
          for nb, lb in pairs(layouts(B)) do
            local X = linalg.solve(la, lb)
            assert.are.equal(dtype, X:dtype())
            R.near(mats(X)[1], want, tol[dtype], na .. " A, " .. nb .. " B")
          end
          local Xr = linalg.solve(la, layouts(Bt).transposed, { left = false })
          R.near(mats(Xr)[1], want_right, tol[dtype], na .. " A, left = false")
          -- a true transpose: A^T's values, no copy
          local Xt = linalg.solve(la:t(), B)
          R.near(mats(Xt)[1], R.solve(R.t(Am), mats(B)[1]), tol[dtype], na .. " A:t()")
        end
      end)
    end

    it("broadcasts batch dims: A [2,1,3,3] with B [4,3,2], and expanded views", function()
      local A = batch_of({ 2, 1 }, function() return general(3) end)
      local B = batch_of({ 4 }, function() return rmat(3, 2) end)
      local X = linalg.solve(A, B)
      assert.are.same({ 2, 4, 3, 2 }, X:shape())
      local As, Bs, Xs = mats(expand_batch(A, { 2, 4 })), mats(expand_batch(B, { 2, 4 })), mats(X)
      for b = 1, 8 do R.near(Xs[b], R.solve(As[b], Bs[b]), 1e-11, "batch element " .. b) end
      -- stride-0 batch dims in, and a B that broadcasts over A's batch
      local A1 = tensor_of({ general(3) }, { 1 }, "float32")
      local Xe = linalg.solve(A1:expand(3, 3, 3), B:narrow(1, 1, 3):float())
      local Be = mats(B:narrow(1, 1, 3))
      for b = 1, 3 do R.near(mats(Xe)[b], R.solve(mats(A1)[1], Be[b]), tol.float32, "expanded " .. b) end
      local Xb = linalg.solve(batch_of({ 3 }, function() return general(3) end), tensor_of({ rmat(3, 1) }))
      assert.are.same({ 3, 3, 1 }, Xb:shape())
      -- right-hand sides as vectors: [n] for each matrix, or [batch..., n]
      local Av = batch_of({ 2 }, function() return general(3) end)
      local bv = tide.tensor({ { 1, 2, 3 }, { -1, 0, 2 } }, "float64")
      local xv = linalg.solve(Av, bv)
      assert.are.same({ 2, 3 }, xv:shape())
      for b = 1, 2 do
        R.near(R.column(vecs(xv)[b]), R.solve(mats(Av)[b], R.column(vecs(bv)[b])), 1e-11, "vector " .. b)
      end
      local x1 = linalg.solve(Av, tide.tensor({ 1, 2, 3 }, "float64"))
      assert.are.same({ 2, 3 }, x1:shape())
      R.near(R.column(vecs(x1)[2]), R.solve(mats(Av)[2], R.column { 1, 2, 3 }), 1e-11, "one vector for the batch")
    end)

    it("promotes mixed dtypes, takes the same tensor twice, and vectors with left = false", function()
      local Am, Bm = general(3), rmat(3, 2)
      local X = linalg.solve(tensor_of({ Am }, {}, "float32"), tensor_of({ Bm }, {}, "float64"))
      assert.are.equal("float64", X:dtype())
      local A32 = mats(tensor_of({ Am }, {}, "float32"))[1]
      R.near(mats(X)[1], R.solve(A32, Bm), 1e-11, "float32 A, float64 B")
      assert.are.equal("float64", linalg.solve(tensor_of { Am }, tide.tensor({ { 1 }, { 2 }, { 3 } }, "int32")):dtype())
      local A = tensor_of { Am }
      R.near(mats(linalg.solve(A, A))[1], R.eye(3), 1e-12, "solve(A, A)")
      -- x A = b for a vector b: x = A^-T b
      local xr = linalg.solve(A, tide.tensor({ 1, -1, 2 }, "float64"), { left = false })
      assert.are.same({ 3 }, xr:shape())
      R.near(R.column(vecs(xr)[1]), R.solve(R.t(Am), R.column { 1, -1, 2 }), 1e-11, "left = false, vector")
    end)

    it("handles empty systems and batches, and float16 storage", function()
      assert.are.same({ 0, 2 }, linalg.solve(tide.zeros(0, 0), tide.zeros(0, 2)):shape())
      assert.are.same({ 3, 0 }, linalg.solve(tensor_of { general(3) }, tide.zeros({ 3, 0 }, "float64")):shape())
      assert.are.same({ 0, 3, 2 }, linalg.solve(tide.zeros(0, 3, 3), tide.zeros(0, 3, 2)):shape())
      assert.are.same({ 0 }, linalg.solve(tide.zeros(0, 0), tide.zeros(0)):shape())
      local A, B = tensor_of({ general(3) }, {}, "float16"), tensor_of({ rmat(3, 2) }, {}, "float16")
      local X = linalg.solve(A, B)
      assert.are.equal("float16", X:dtype())
      R.near(mats(X)[1], R.solve(mats(A)[1], mats(B)[1]), 2e-3, "float16")
    end)
  end)

  describe("solve_triangular", function()
    it("solves a hand-checked system", function()
      local A = tide.tensor { { 2, 1 }, { 0, 4 } }
      H.close(linalg.solve_triangular(A, tide.tensor { { 4 }, { 8 } }, { upper = true }), { { 1 }, { 2 } }, 1e-7)
      H.close(linalg.solve_triangular(A:t(), tide.tensor { { 4 }, { 10 } }, { upper = false }), { { 2 }, { 2 } }, 1e-7)
    end)

    for _, dtype in ipairs { "float32", "float64" } do
      it("reads only its triangle, upper and lower, left and right, unit or not, in " .. dtype, function()
        -- the other triangle (and, for unitriangular, the diagonal) holds values that must be ignored
        local Am = rmat(4, 4)
        for i = 1, 4 do Am[i][i] = 2 + i / 4 end
        local A = tensor_of({ Am }, {}, dtype)
        local B, Bt = tensor_of({ rmat(4, 3) }, {}, dtype), tensor_of({ rmat(3, 4) }, {}, dtype)
        Am = mats(A)[1]
        for _, upper in ipairs { true, false } do
          for _, unit in ipairs { false, true } do
            local what = (upper and "upper" or "lower") .. (unit and ", unit" or "")
            local want = R.solve_triangular(Am, mats(B)[1], upper, unit)
            local want_right = R.t(R.solve_triangular(R.t(Am), R.t(mats(Bt)[1]), not upper, unit))
            for name, la in pairs(layouts(A)) do
              local X = linalg.solve_triangular(la, B, { upper = upper, unitriangular = unit })
              assert.are.equal(dtype, X:dtype())
              R.near(mats(X)[1], want, tol[dtype], what .. ", " .. name)
              local Xr = linalg.solve_triangular(la, Bt, { upper = upper, left = false, unitriangular = unit })
              R.near(mats(Xr)[1], want_right, tol[dtype], what .. ", left = false, " .. name)
            end
          end
        end
      end)
    end

    it("broadcasts batch dims and handles empty ones", function()
      local A = batch_of({ 2, 1 }, function() local M = rmat(3, 3); for i = 1, 3 do M[i][i] = 3 end; return M end)
      local Bt = batch_of({ 3 }, function() return rmat(2, 3) end)
      local Xt = linalg.solve_triangular(A, Bt, { upper = true, left = false })
      assert.are.same({ 2, 3, 2, 3 }, Xt:shape())
      local Ae, Bte = mats(expand_batch(A, { 2, 3 })), mats(expand_batch(Bt, { 2, 3 }))
      for b, Xb in ipairs(mats(Xt)) do
        R.near(Xb, R.t(R.solve_triangular(R.t(Ae[b]), R.t(Bte[b]), false, false)), 1e-11, "left = false, batch " .. b)
      end
      local B = batch_of({ 3 }, function() return rmat(3, 2) end)
      local X = linalg.solve_triangular(A, B, { upper = false })
      assert.are.same({ 2, 3, 3, 2 }, X:shape())
      local As, Bs = mats(expand_batch(A, { 2, 3 })), mats(expand_batch(B, { 2, 3 }))
      for b, Xb in ipairs(mats(X)) do
        R.near(Xb, R.solve_triangular(As[b], Bs[b], false, false), 1e-11, "batch element " .. b)
      end
      assert.are.same({ 0, 3, 2 }, linalg.solve_triangular(tide.zeros(0, 3, 3), tide.zeros(0, 3, 2), { upper = true }):shape())
      assert.are.same({ 0, 4 }, linalg.solve_triangular(tide.zeros(0, 0), tide.zeros(0, 4), { upper = true }):shape())
    end)
  end)

  describe("inv", function()
    it("inverts hand-checked matrices, as tide.inverse and A:inverse()", function()
      local A = tide.tensor { { 4, 7 }, { 2, 6 } }
      local want = { { 0.6, -0.7 }, { -0.2, 0.4 } }
      H.close(linalg.inv(A), want, 1e-6, 1e-7)
      H.close(tide.inverse(A), want, 1e-6, 1e-7)
      H.close(A:inverse(), want, 1e-6, 1e-7)
      H.close(linalg.inv(tide.tensor({ { -8 } }, "float64")), { { -0.125 } }, 0, 0)
      H.close(linalg.inv(tide.tensor({ { 0, 2 }, { 4, 0 } }, "int32")), { { 0, 0.25 }, { 0.5, 0 } }, 1e-7)
      assert.are.equal("float32", linalg.inv(tide.tensor({ { 1 } }, "int32")):dtype())
    end)

    for _, dtype in ipairs { "float32", "float64" } do
      it("matches Gaussian elimination in " .. dtype .. " for batches in every layout", function()
        local A = batch_of({ 2, 3 }, function() return general(4) end, dtype)
        for name, la in pairs(layouts(A)) do
          local X = linalg.inv(la)
          assert.are.equal(dtype, X:dtype())
          assert.are.same({ 2, 3, 4, 4 }, X:shape())
          for b, Ab in ipairs(mats(A)) do
            R.near(mats(X)[b], R.inv(Ab), tol[dtype], name .. " batch " .. b)
            R.near(R.mm(Ab, mats(X)[b]), R.eye(4), tol[dtype], name .. " A inv(A) " .. b)
          end
        end
        local A1 = tensor_of({ general(3) }, { 1 }, dtype)
        local Xe = linalg.inv(A1:expand(2, 3, 3))
        for b = 1, 2 do R.near(mats(Xe)[b], R.inv(mats(A1)[1]), tol[dtype], "expanded " .. b) end
      end)
    end

    it("handles empty matrices and batches", function()
      assert.are.same({ 0, 0 }, linalg.inv(tide.zeros(0, 0)):shape())
      assert.are.same({ 0, 3, 3 }, linalg.inv(tide.zeros(0, 3, 3)):shape())
      assert.are.same({ 2, 0, 0 }, linalg.inv(tide.zeros(2, 0, 0)):shape())
    end)
  end)

  describe("det, slogdet and logdet", function()
    it("gives hand-checked values", function()
      local A = tide.tensor { { 1, 2 }, { 3, 4 } }
      H.close(linalg.det(A), -2, 1e-6)
      H.close(A:det(), -2, 1e-6)
      local sign, logabs = linalg.slogdet(A)
      H.equal(sign, -1)
      H.close(logabs, math.log(2), 1e-6)
      local s2, l2 = A:slogdet()
      H.equal(s2, -1)
      H.close(l2, math.log(2), 1e-6)
      local nan = tide.logdet(A):item()
      assert.is_true(nan ~= nan, "logdet of a matrix with det < 0 is NaN, got " .. nan)
      local D = tide.tensor({ { 2, 0 }, { 0, 3 } }, "float64")
      H.close(tide.logdet(D), math.log(6), 1e-15)
      H.close(D:logdet(), math.log(6), 1e-15)
      -- singular: det 0, sign 0 and log|det| -inf, logdet -inf
      local S = tide.tensor({ { 1, 2 }, { 2, 4 } }, "float64")
      H.equal(linalg.det(S), 0)
      local ss, ls = linalg.slogdet(S)
      H.equal(ss, 0)
      H.equal(ls, -math.huge)
      H.equal(tide.logdet(S), -math.huge)
      -- 1x1, a zero first pivot, integers
      H.close(linalg.det(tide.tensor({ { -3 } }, "float64")), -3, 2e-16)
      H.close(linalg.det(tide.tensor({ { 0, 1, 0 }, { 0, 0, 1 }, { 1, 0, 0 } }, "float64")), 1, 0, 1e-15)
      H.close(linalg.det(tide.tensor({ { 0, 1 }, { 1, 0 } }, "float64")), -1, 0, 1e-15)
      local di = linalg.det(tide.tensor({ { 2, 1 }, { 1, 3 } }, "int64"))
      assert.are.equal("float32", di:dtype())
      H.close(di, 5, 1e-6)
    end)

    for _, dtype in ipairs { "float32", "float64" } do
      it("matches Gaussian elimination in " .. dtype .. " for batches in every layout", function()
        local A = batch_of({ 3, 2 }, function(b) local M = rmat(4, 4, -2, 2); if b == 4 then M[1] = M[2] end; return M end,
          dtype)
        local dets, signs, logs = {}, {}, {}
        for b, Ab in ipairs(mats(A)) do
          dets[b] = R.det(Ab)
          signs[b], logs[b] = R.slogdet(Ab)
        end
        for name, la in pairs(layouts(A)) do
          local d = linalg.det(la)
          assert.are.same({ 3, 2 }, d:shape())
          assert.are.equal(dtype, d:dtype())
          local s, l = linalg.slogdet(la)
          local dv, sv, lv = H.flat(d:totable()), H.flat(s:totable()), H.flat(l:totable())
          for b = 1, 6 do
            local w = name .. " batch " .. b
            if b == 4 then   -- two equal rows: exactly singular only if the elimination is exact; near 0 otherwise
              assert(math.abs(dv[b]) <= tol[dtype] * 16, w .. ": det of a singular matrix " .. dv[b])
            else
              R.near(dv[b], dets[b], tol[dtype] * 20, w .. " det")
              assert.are.equal(signs[b], sv[b], w .. " sign")
              R.near(lv[b], logs[b], tol[dtype] * 20, w .. " logabsdet")
            end
          end
        end
      end)
    end

    it("gives 0, sign 0 and -inf for the singular elements of a batch, and spans a wide range in float32", function()
      local B = tide.stack { tide.eye(2, "float64"), tide.tensor({ { 1, 2 }, { 2, 4 } }, "float64"),
        tide.tensor({ { 0, 1 }, { 1, 0 } }, "float64") }
      H.close(linalg.det(B), { 1, 0, -1 }, 0, 1e-15)
      local s, l = linalg.slogdet(B)
      H.equal(s, { 1, 0, -1 })
      H.close(l, { 0, -math.huge, 0 }, 0, 1e-15)
      local ld = H.flat(tide.logdet(B):totable())
      assert.are.same({ 0, -math.huge }, { ld[1], ld[2] })
      assert.is_true(ld[3] ~= ld[3], "logdet of det -1 is NaN")
      -- det 1e60 and 1e-60 overflow and underflow float32; log|det| does not
      for _, v in ipairs { 1e3, 1e-3 } do
        local D = (tide.eye(20) * v):float()
        local sd, lg = linalg.slogdet(D)
        H.equal(sd, 1)
        H.close(lg, 20 * math.log(v), 1e-5)
      end
    end)

    it("handles empty matrices (det 1) and empty batches", function()
      H.equal(linalg.det(tide.zeros(0, 0)), 1)
      local s, l = linalg.slogdet(tide.zeros(0, 0))
      H.equal(s, 1)
      H.equal(l, 0)
      H.equal(linalg.det(tide.zeros(2, 0, 0)), { 1, 1 })
      assert.are.same({ 0 }, linalg.det(tide.zeros(0, 3, 3)):shape())
      local s0, l0 = linalg.slogdet(tide.zeros(0, 3, 3))
      assert.are.same({ 0 }, s0:shape())
      assert.are.same({ 0 }, l0:shape())
      assert.are.same({ 0 }, tide.logdet(tide.zeros(0, 3, 3)):shape())
    end)
  end)

  describe("cholesky", function()
    it("factors a hand-checked matrix, lower and upper, in each spelling", function()
      local A = tide.tensor({ { 4, 2 }, { 2, 3 } }, "float64")
      local L = { { 2, 0 }, { 1, math.sqrt(2) } }
      local U = { { 2, 1 }, { 0, math.sqrt(2) } }
      H.close(linalg.cholesky(A), L, 1e-15)
      H.close(linalg.cholesky(A, { upper = false }), L, 1e-15)
      H.close(linalg.cholesky(A, { upper = true }), U, 1e-15)
      H.close(tide.cholesky(A), L, 1e-15)
      H.close(tide.cholesky(A, true), U, 1e-15)
      H.close(A:cholesky(), L, 1e-15)
      H.close(A:cholesky(true), U, 1e-15)
      H.equal(linalg.cholesky(tide.tensor { { 9 } }), { { 3 } })
    end)

    for _, dtype in ipairs { "float32", "float64" } do
      it("matches the reference in " .. dtype .. ", reading only the triangle it is told to", function()
        local S = { spd(4), spd(4), spd(4) }
        -- garbage in the triangle that is not read
        local low, up = {}, {}
        for b = 1, 3 do
          low[b], up[b] = R.copy(S[b]), R.copy(S[b])
          for i = 1, 4 do
            for j = i + 1, 4 do low[b][i][j] = 100 + i; up[b][j][i] = -100 - j end
          end
        end
        local Al, Au = tensor_of(low, { 3 }, dtype), tensor_of(up, { 3 }, dtype)
        for name, la in pairs(layouts(Al)) do
          local L = linalg.cholesky(la)
          assert.are.equal(dtype, L:dtype())
          for b, Lb in ipairs(mats(L)) do
            local Sb = mats(Al)[b]
            local want = R.cholesky(Sb)
            R.check_triangular(Lb, true, name .. " L " .. b)
            R.near(Lb, want, tol[dtype], name .. " L " .. b)
          end
        end
        for name, la in pairs(layouts(Au)) do
          local U = linalg.cholesky(la, { upper = true })
          for b, Ub in ipairs(mats(U)) do
            R.check_triangular(Ub, false, name .. " U " .. b)
            R.near(Ub, R.t(R.cholesky(R.t(mats(Au)[b]))), tol[dtype], name .. " U " .. b)
          end
        end
        local A1 = tensor_of({ S[1] }, { 1 }, dtype)
        local Le = linalg.cholesky(A1:expand(2, 4, 4))
        R.near(mats(Le)[2], R.cholesky(mats(A1)[1]), tol[dtype], "expanded")
      end)
    end

    it("handles empty matrices and batches", function()
      assert.are.same({ 0, 0 }, linalg.cholesky(tide.zeros(0, 0)):shape())
      assert.are.same({ 0, 3, 3 }, linalg.cholesky(tide.zeros(0, 3, 3)):shape())
      assert.are.same({ 0, 3, 3 }, linalg.cholesky(tide.zeros(0, 3, 3), { upper = true }):shape())
    end)

    it("solves and inverts with the factor: cholesky_solve and cholesky_inverse", function()
      local S = spd(4)
      local A = tensor_of({ S }, {}, "float64")
      local B = tensor_of({ rmat(4, 2) }, {}, "float64")
      local L, U = linalg.cholesky(A), linalg.cholesky(A, { upper = true })
      local want = R.solve(S, mats(B)[1])
      R.near(mats(tide.cholesky_solve(B, L))[1], want, 1e-11, "cholesky_solve lower")
      R.near(mats(tide.cholesky_solve(B, L, false))[1], want, 1e-11, "cholesky_solve lower, explicit")
      R.near(mats(tide.cholesky_solve(B, U, true))[1], want, 1e-11, "cholesky_solve upper")
      R.near(mats(tide.cholesky_inverse(L))[1], R.inv(S), 1e-11, "cholesky_inverse lower")
      R.near(mats(tide.cholesky_inverse(U, true))[1], R.inv(S), 1e-11, "cholesky_inverse upper")
      -- batched
      local Ab = batch_of({ 2 }, function() return spd(3) end)
      local Bb = batch_of({ 2 }, function() return rmat(3, 1) end)
      local Xb = tide.cholesky_solve(Bb, linalg.cholesky(Ab))
      for b = 1, 2 do R.near(mats(Xb)[b], R.solve(mats(Ab)[b], mats(Bb)[b]), 1e-11, "batch " .. b) end
      H.close(tide.cholesky_inverse(tide.tensor({ { 2 } }, "float64")), { { 0.25 } }, 1e-15)
      -- B's batch dims broadcast against L's
      local Bc = batch_of({ 3 }, function() return rmat(4, 1) end)
      local Xc = tide.cholesky_solve(Bc, L)
      assert.are.same({ 3, 4, 1 }, Xc:shape())
      for b = 1, 3 do R.near(mats(Xc)[b], R.solve(S, mats(Bc)[b]), 1e-11, "broadcast " .. b) end
    end)
  end)

  describe("eigh", function()
    it("gives hand-checked eigenvalues and signed eigenvectors", function()
      local w, V = linalg.eigh(tide.tensor({ { 2, 1 }, { 1, 2 } }, "float64"))
      H.close(w, { 1, 3 }, 1e-14)
      H.close(V:abs(), { { 1 / math.sqrt(2), 1 / math.sqrt(2) }, { 1 / math.sqrt(2), 1 / math.sqrt(2) } }, 1e-14)
      R.check_signs(mats(V)[1], "V of [[2,1],[1,2]]")
      -- eigenvalues 1 and 6: (1, -2)/sqrt 5 signed to (-1, 2), and (2, 1)/sqrt 5
      local r5 = math.sqrt(5)
      local w2, V2 = linalg.eigh(tide.tensor { { 5, 2 }, { 2, 2 } })
      H.close(w2, { 1, 6 }, 1e-6)
      H.close(V2, { { -1 / r5, 2 / r5 }, { 2 / r5, 1 / r5 } }, 1e-6, 1e-7)
      H.close(linalg.eigvalsh(tide.tensor { { 5, 2 }, { 2, 2 } }), { 1, 6 }, 1e-6)
      -- a diagonal matrix: eigenvalues sorted, eigenvectors the signed unit vectors
      local w3, V3 = linalg.eigh(tide.tensor({ { 3, 0, 0 }, { 0, -1, 0 }, { 0, 0, 2 } }, "float64"))
      H.close(w3, { -1, 2, 3 }, 1e-15)
      H.close(V3, { { 0, 0, 1 }, { 1, 0, 0 }, { 0, 1, 0 } }, 0, 1e-15)
      local w1, V1 = linalg.eigh(tide.tensor({ { -2 } }, "float64"))
      H.equal(w1, { -2 })
      H.equal(V1, { { 1 } })
    end)

    for _, dtype in ipairs { "float32", "float64" } do
      it("satisfies A V = V diag(w) in " .. dtype .. " for batches in every layout", function()
        local S = {}
        for b = 1, 4 do S[b] = with_eigs { -3 + b / 8, -1, 0.5, 2, 4 - b / 8 } end
        local A = tensor_of(S, { 2, 2 }, dtype)
        for name, la in pairs(layouts(A)) do
          local w, V = linalg.eigh(la)
          check_eigh(A, w, V, dtype, name)
          H.close(linalg.eigvalsh(la), w, 0, 0, name .. " eigvalsh")
        end
        local A1 = tensor_of({ S[1] }, { 1 }, dtype)
        local w, V = linalg.eigh(A1:expand(3, 5, 5))
        check_eigh(A1:expand(3, 5, 5), w, V, dtype, "expanded")
      end)
    end

    it("reads the lower triangle, or the upper one with UPLO 'U'", function()
      local S = with_eigs { -1, 0.25, 1.5, 3 }
      local low, up = R.copy(S), R.copy(S)
      for i = 1, 4 do for j = i + 1, 4 do low[i][j] = 7; up[j][i] = -7 end end
      local As = tensor_of { S }
      local wl, Vl = linalg.eigh(tensor_of { low })
      check_eigh(As, wl, Vl, "float64", "lower")
      local wl2 = linalg.eigh(tensor_of { low }, "L")
      H.equal(wl2, wl)
      for name, la in pairs(layouts(tensor_of({ up, up }, { 2 }))) do
        local wu, Vu = linalg.eigh(la, "U")
        check_eigh(tensor_of({ S, S }, { 2 }), wu, Vu, "float64", "upper, " .. name)
      end
      H.close(linalg.eigvalsh(tensor_of { up }, "U"), R.eigvalsh(S), 1e-12)
      H.close(linalg.eigvalsh(tensor_of { low }), R.eigvalsh(S), 1e-12)
    end)

    it("handles empty matrices and batches", function()
      local w, V = linalg.eigh(tide.zeros(0, 0))
      assert.are.same({ 0 }, w:shape())
      assert.are.same({ 0, 0 }, V:shape())
      local wb, Vb = linalg.eigh(tide.zeros(0, 3, 3))
      assert.are.same({ 0, 3 }, wb:shape())
      assert.are.same({ 0, 3, 3 }, Vb:shape())
      assert.are.same({ 2, 0 }, linalg.eigvalsh(tide.zeros(2, 0, 0)):shape())
    end)
  end)

  describe("qr", function()
    it("factors a hand-checked matrix with LAPACK's signs", function()
      local r10 = math.sqrt(10)
      local A = tide.tensor({ { 1, 2 }, { 3, 4 } }, "float64")
      local Q, Rt = linalg.qr(A)
      H.close(Q, { { -1 / r10, -3 / r10 }, { -3 / r10, 1 / r10 } }, 1e-14)
      H.close(Rt, { { -r10, -14 / r10 }, { 0, -2 / r10 } }, 1e-14)
      local Q2, R2 = A:qr()
      H.equal(Q2, Q)
      H.equal(R2, Rt)
      -- 1x1: the reflector is the identity, R keeps the sign
      local Q1, R1 = linalg.qr(tide.tensor({ { -2 } }, "float64"))
      H.equal(Q1, { { 1 } })
      H.equal(R1, { { -2 } })
      -- a column: Q's column is -A / |A| when A's first element is positive
      local Qc, Rc = linalg.qr(tide.tensor({ { 3 }, { 4 } }, "float64"))
      H.close(Qc, { { -0.6 }, { -0.8 } }, 1e-15)
      H.close(Rc, { { -5 } }, 1e-15)
      -- a row: nothing below the diagonal, Q = I
      local Qr, Rr = linalg.qr(tide.tensor({ { -1, 2, 3 } }, "float64"), "complete")
      H.equal(Qr, { { 1 } })
      H.equal(Rr, { { -1, 2, 3 } })
    end)

    for _, dtype in ipairs { "float32", "float64" } do
      it("matches Householder QR in " .. dtype .. ": tall, wide and square, every mode and layout", function()
        for _, sz in ipairs { { 5, 3 }, { 3, 5 }, { 4, 4 } } do
          local A = batch_of({ 2 }, function() return rmat(sz[1], sz[2]) end, dtype)
          for name, la in pairs(layouts(A)) do
            for _, mode in ipairs { "reduced", "complete", "r" } do
              local Q, Rt = linalg.qr(la, mode)
              check_qr(A, Q, Rt, mode, dtype, string.format("%dx%d %s %s", sz[1], sz[2], name, mode))
            end
            local Q, Rt = linalg.qr(la)
            check_qr(A, Q, Rt, "reduced", dtype, string.format("%dx%d %s default", sz[1], sz[2], name))
          end
        end
        local A1 = tensor_of({ rmat(4, 3) }, { 1 }, dtype)
        local Q, Rt = linalg.qr(A1:expand(2, 4, 3))
        check_qr(A1:expand(2, 4, 3), Q, Rt, "reduced", dtype, "expanded")
      end)
    end

    it("handles empty matrices and batches", function()
      for _, sz in ipairs { { 0, 3 }, { 3, 0 }, { 0, 0 } } do
        local A = tide.zeros(sz, "float64")
        for _, mode in ipairs { "reduced", "complete", "r" } do
          local Q, Rt = linalg.qr(A, mode)
          check_qr(A, Q, Rt, mode, "float64", string.format("[%d,%d] %s", sz[1], sz[2], mode))
        end
      end
      local Q = linalg.qr(tide.zeros({ 3, 0 }, "float64"), "complete")
      H.equal(Q, { { 1, 0, 0 }, { 0, 1, 0 }, { 0, 0, 1 } })
      local Qb, Rb = linalg.qr(tide.zeros(0, 4, 3))
      assert.are.same({ 0, 4, 3 }, Qb:shape())
      assert.are.same({ 0, 3, 3 }, Rb:shape())
    end)
  end)

  describe("svd", function()
    it("decomposes a hand-checked matrix, in each spelling", function()
      local r5, r10, r2 = math.sqrt(5), math.sqrt(10), math.sqrt(2)
      local A = tide.tensor({ { 3, 0 }, { 4, 5 } }, "float64")
      local Uw = { { 1 / r10, 3 / r10 }, { 3 / r10, -1 / r10 } }
      local Vhw = { { 1 / r2, 1 / r2 }, { 1 / r2, -1 / r2 } }
      local U, S, Vh = linalg.svd(A)
      H.close(S, { 3 * r5, r5 }, 1e-14)
      H.close(U, Uw, 1e-14, 1e-15)
      H.close(Vh, Vhw, 1e-14, 1e-15)
      local U2, S2, Vh2 = linalg.svd(A, { full_matrices = false })
      H.close(U2, Uw, 1e-14, 1e-15)
      H.close(S2, { 3 * r5, r5 }, 1e-14)
      H.close(Vh2, Vhw, 1e-14, 1e-15)
      H.close(linalg.svdvals(A), { 3 * r5, r5 }, 1e-14)
      -- torch.svd's form: V, not Vh
      local U3, S3, V3 = tide.svd(A)
      H.close(U3, Uw, 1e-14, 1e-15)
      H.close(S3, { 3 * r5, r5 }, 1e-14)
      H.close(V3, R.t(Vhw), 1e-14, 1e-15)
      local _, _, V4 = A:svd()
      H.close(V4, R.t(Vhw), 1e-14, 1e-15)
      -- 1x1: U carries the sign convention, Vh the sign of A
      local U1, S1, Vh1 = linalg.svd(tide.tensor({ { -2 } }, "float64"))
      H.equal(U1, { { 1 } })
      H.equal(S1, { 2 })
      H.equal(Vh1, { { -1 } })
      -- a diagonal matrix: singular values sorted, U the signed unit vectors
      local Ud, Sd = linalg.svd(tide.tensor({ { 1, 0 }, { 0, -3 } }, "float64"))
      H.close(Sd, { 3, 1 }, 1e-15)
      H.close(Ud, { { 0, 1 }, { 1, 0 } }, 0, 1e-15)
    end)

    for _, dtype in ipairs { "float32", "float64" } do
      it("satisfies A = U diag(S) Vh in " .. dtype .. ": tall, wide, square, full or not, every layout", function()
        for _, sz in ipairs { { 5, 3 }, { 3, 5 }, { 4, 4 } } do
          local A = batch_of({ 2 }, function() return rmat(sz[1], sz[2]) end, dtype)
          for name, la in pairs(layouts(A)) do
            for _, full in ipairs { true, false } do
              local U, S, Vh = linalg.svd(la, { full_matrices = full })
              check_svd(A, U, S, Vh, full, dtype, string.format("%dx%d %s full=%s", sz[1], sz[2], name, tostring(full)))
              -- without U and V LAPACK takes another path: the same values within rounding
              H.close(linalg.svdvals(la), S, tol[dtype], tol[dtype], "svdvals")
            end
            local U, S, Vh = linalg.svd(la)
            check_svd(A, U, S, Vh, true, dtype, string.format("%dx%d %s default", sz[1], sz[2], name))
          end
          -- torch.svd: some = true (the default) is reduced; V = Vh^T
          local U, S, V = tide.svd(A)
          local Ur, Sr, Vhr = linalg.svd(A, { full_matrices = false })
          H.equal(U, Ur)
          H.equal(S, Sr)
          H.equal(V, Vhr:transpose(2, 3))
          local Uf, _, Vf = tide.svd(A, false)
          local Ufull, _, Vhfull = linalg.svd(A)
          H.equal(Uf, Ufull)
          H.equal(Vf, Vhfull:transpose(2, 3))
          local Um = A:svd(true)
          H.equal(Um, Ur)
        end
        local A1 = tensor_of({ rmat(3, 4) }, { 1 }, dtype)
        local U, S, Vh = linalg.svd(A1:expand(2, 3, 4), { full_matrices = false })
        check_svd(A1:expand(2, 3, 4), U, S, Vh, false, dtype, "expanded")
      end)
    end

    it("handles rank-deficient, empty and batched-empty matrices", function()
      local A = tensor_of { with_svals(4, 3, { 2, 1, 0 }) }
      local U, S, Vh = linalg.svd(A)
      check_svd(A, U, S, Vh, true, "float64", "rank 2")
      local Z = tide.zeros(3, 2, "float64")
      local Uz, Sz, Vhz = linalg.svd(Z)
      check_svd(Z, Uz, Sz, Vhz, true, "float64", "zeros")
      H.equal(Sz, { 0, 0 })
      for _, sz in ipairs { { 0, 3 }, { 3, 0 }, { 0, 0 } } do
        local E = tide.zeros(sz, "float64")
        for _, full in ipairs { true, false } do
          local Ue, Se, Vhe = linalg.svd(E, { full_matrices = full })
          check_svd(E, Ue, Se, Vhe, full, "float64", string.format("[%d,%d] full=%s", sz[1], sz[2], tostring(full)))
        end
        assert.are.same({ 0 }, linalg.svdvals(E):shape())
      end
      assert.are.same({ 3, 0 }, linalg.pinv(tide.zeros(0, 3)):shape())
      assert.are.same({ 2, 0, 4 }, linalg.pinv(tide.zeros(2, 4, 0)):shape())
      H.equal(linalg.matrix_rank(tide.zeros(0, 3)), 0)
      H.equal(linalg.matrix_rank(tide.zeros(2, 0, 0)), { 0, 0 })
      local Ub, Sb, Vhb = linalg.svd(tide.zeros(0, 4, 3), { full_matrices = false })
      assert.are.same({ 0, 4, 3 }, Ub:shape())
      assert.are.same({ 0, 3 }, Sb:shape())
      assert.are.same({ 0, 3, 3 }, Vhb:shape())
    end)
  end)

  describe("repeated values, half storage, large matrices and NaN", function()
    it("writes each matrix of a large batch in its place (the pool's threads)", function()
      local A = batch_of({ 4, 25 }, function() return general(6) end)
      local S = batch_of({ 100 }, function(b) return with_eigs { -2, -1 + b / 200, 0, 1, 2 + b / 100, 3 } end)
      local Bm = batch_of({ 100 }, function() return rmat(6, 1) end)
      local X = linalg.solve(A, Bm:view(4, 25, 6, 1))
      local As, Bs, Xs = mats(A), mats(Bm), mats(X)
      for b = 1, 100 do R.near(Xs[b], R.solve(As[b], Bs[b]), 1e-11, "solve " .. b) end
      local w = linalg.eigvalsh(S)
      for b, wb in ipairs(vecs(w)) do R.near(wb, R.eigvalsh(mats(S)[b]), 1e-11, "eigvalsh " .. b) end
      local _, Rt = linalg.qr(A, "r")
      for b, Rb in ipairs(mats(Rt)) do
        local _, Rr = R.qr(As[b])
        R.near(Rb, Rr, 1e-11, "qr " .. b)
      end
      local Sv = linalg.svdvals(A)
      for b, sb in ipairs(vecs(Sv)) do R.near(sb, R.svdvals(As[b]), 1e-11, "svdvals " .. b) end
      local d = H.flat(linalg.det(A):totable())
      for b = 1, 100 do R.near(d[b], R.det(As[b]), 1e-11, "det " .. b) end
    end)

    it("gives orthonormal, signed factors where eigenvalues or singular values repeat", function()
      local I3 = tide.eye(3, "float64")
      local w, V = linalg.eigh(I3)
      check_eigh(I3, w, V, "float64", "identity")
      local S2 = tensor_of { with_eigs { 1, 1, 2, -0.5 } }
      local w2, V2 = linalg.eigh(S2)
      check_eigh(S2, w2, V2, "float64", "a double eigenvalue")
      local Q = tensor_of { orth(4) }
      for _, full in ipairs { true, false } do
        local U, S, Vh = linalg.svd(Q, { full_matrices = full })
        check_svd(Q, U, S, Vh, full, "float64", "orthogonal")
        H.close(S, { 1, 1, 1, 1 }, 1e-14)
      end
    end)

    for _, dtype in ipairs { "float16", "bfloat16" } do
      it("keeps " .. dtype .. " storage, computing in float32", function()
        local t = dtype == "float16" and 4e-3 or 3e-2
        local S = tensor_of({ spd(3) }, {}, dtype)
        local Sm = mats(S)[1]
        local L = linalg.cholesky(S)
        assert.are.equal(dtype, L:dtype())
        R.near(mats(L)[1], R.cholesky(Sm), t, dtype .. " cholesky")
        local w, V = linalg.eigh(S)
        assert.are.equal(dtype, w:dtype())
        assert.are.equal(dtype, V:dtype())
        R.near(vecs(w)[1], R.eigvalsh(Sm), t, dtype .. " eigenvalues")
        local A = tensor_of({ rmat(4, 3) }, {}, dtype)
        local Q, Rt = linalg.qr(A)
        assert.are.equal(dtype, Q:dtype())
        local _, Rr = R.qr(mats(A)[1])
        R.near(mats(Rt)[1], { Rr[1], Rr[2], Rr[3] }, t, dtype .. " R")
        local U, Sv, Vh = linalg.svd(A, { full_matrices = false })
        assert.are.same({ dtype, dtype, dtype }, { U:dtype(), Sv:dtype(), Vh:dtype() })
        R.near(vecs(Sv)[1], R.svdvals(mats(A)[1]), t, dtype .. " S")
        local sign, logabs = linalg.slogdet(S)
        assert.are.equal(dtype, logabs:dtype())
        local rs, rl = R.slogdet(Sm)
        assert.are.equal(rs, sign:item())
        R.near(logabs:item(), rl, t, dtype .. " logabsdet")
        local X = linalg.solve_triangular(L, S, { upper = false })
        assert.are.equal(dtype, X:dtype())
      end)
    end

    it("factors lone large matrices on OpenBLAS's threads", function()
      local n = 120
      local Am = general(n)
      local A = tensor_of { Am }
      local Bm = rmat(n, 2)
      local X = linalg.solve(A, tensor_of { Bm })
      R.near(R.mm(Am, mats(X)[1]), Bm, 1e-11, "A X = B")
      local Sm = spd(n)
      local S = tensor_of { Sm }
      local L = mats(linalg.cholesky(S))[1]
      R.check_triangular(L, true, "L")
      R.near(R.mm(L, R.t(L)), Sm, 1e-11, "L L^T")
      local w, V = linalg.eigh(S)
      local Vm, wv = mats(V)[1], vecs(w)[1]
      R.check_sorted(wv, false, "eigenvalues")
      R.check_orthonormal(Vm, 1e-11, "V")
      R.near(R.mm(Sm, Vm), R.mdiag(Vm, wv), 1e-11, "S V = V diag(w)")
      R.check_signs(Vm, "V")
      local Q, Rt = linalg.qr(A)
      local Qm, Rm = mats(Q)[1], mats(Rt)[1]
      R.check_triangular(Rm, false, "R")
      R.check_orthonormal(Qm, 1e-11, "Q")
      R.near(R.mm(Qm, Rm), Am, 1e-11, "Q R")
      local _, Rref = R.qr(Am)
      for i = 1, n do R.near(Rm[i][i], Rref[i][i], 1e-10, "R's diagonal " .. i) end
      local U, Sv, Vh = linalg.svd(A)
      local Um, sv, Vhm = mats(U)[1], vecs(Sv)[1], mats(Vh)[1]
      R.check_orthonormal(Um, 1e-11, "U")
      R.check_signs(Um, "U")
      R.near(R.mm(R.mdiag(Um, sv), Vhm), Am, 1e-11, "U diag(S) Vh")
      R.near(sv[1], 3, 1e-12, "largest singular value")
      R.near(sv[n], 1, 1e-12, "smallest singular value")
      H.close(linalg.det(A):abs(), math.exp(select(2, R.slogdet(Am))), 1e-10)
    end)

    it("gives NaN for a matrix holding NaN, as solve, qr and eigh do, or says so", function()
      local A = tide.tensor({ { 1, 0 / 0 }, { 0 / 0, 2 } }, "float64")
      local function nan_or_clear(what, f)
        local ok, res = pcall(function() return H.flat(f():totable()) end)
        if ok then
          assert(res[1] ~= res[1], what .. ": expected NaN, got " .. tostring(res[1]))
        else
          local err = tostring(res)
          assert(err:find("NaN", 1, true) and not err:find("a bug in Tide", 1, true),
            what .. ": an error that does not say the input holds NaN: " .. err)
        end
      end
      nan_or_clear("solve", function() return linalg.solve(A, tide.ones(2, 1, "float64")) end)
      nan_or_clear("qr", function() return (linalg.qr(A)) end)
      nan_or_clear("eigh", function() return (linalg.eigh(A)) end)
      nan_or_clear("svdvals", function() return linalg.svdvals(A) end)
      nan_or_clear("svd", function() return select(2, linalg.svd(A)) end)
      nan_or_clear("svd float32", function() return select(2, linalg.svd(A:float())) end)
      nan_or_clear("pinv", function() return linalg.pinv(A) end)
    end)
  end)

  describe("pinv, matrix_rank, lstsq", function()
    it("gives hand-checked pseudo-inverses", function()
      -- rank 1: pinv(A) = A^T / |A|_F^2
      local A = tide.tensor({ { 1, 2 }, { 2, 4 } }, "float64")
      H.close(linalg.pinv(A), { { 1 / 25, 2 / 25 }, { 2 / 25, 4 / 25 } }, 1e-14, 1e-16)
      H.close(A:pinverse(), { { 1 / 25, 2 / 25 }, { 2 / 25, 4 / 25 } }, 1e-14, 1e-16)
      H.close(linalg.pinv(tide.tensor({ { 1, 2 } }, "float64")), { { 0.2 }, { 0.4 } }, 1e-14)
      H.equal(linalg.pinv(tide.zeros(2, 3, "float64")), { { 0, 0 }, { 0, 0 }, { 0, 0 } })
      -- singular values below rtol * the largest are dropped
      local D = tide.tensor({ { 1, 0 }, { 0, 1e-3 } }, "float64")
      H.close(linalg.pinv(D), { { 1, 0 }, { 0, 1000 } }, 1e-12)
      H.close(linalg.pinv(D, { rtol = 1e-2 }), { { 1, 0 }, { 0, 0 } }, 1e-12, 1e-15)
      -- hermitian: from eigh, with |eigenvalues| against the cut-off
      local Sy = tide.tensor({ { 2, 1 }, { 1, -3 } }, "float64")
      R.near(mats(linalg.pinv(Sy, { hermitian = true }))[1], R.inv(mats(Sy)[1]), 1e-12, "hermitian, invertible")
      H.close(linalg.pinv(tide.tensor({ { 1, 1 }, { 1, 1 } }, "float64"), { hermitian = true }),
        { { 0.25, 0.25 }, { 0.25, 0.25 } }, 1e-14)
      H.close(linalg.pinv(tide.tensor({ { 1, 0 }, { 0, -1e-3 } }, "float64"), { hermitian = true, rtol = 1e-2 }),
        { { 1, 0 }, { 0, 0 } }, 1e-12, 1e-15)
      H.close(linalg.pinv(tide.tensor({ { 1, 0 }, { 0, -1e-3 } }, "float64"), { hermitian = true }),
        { { 1, 0 }, { 0, -1000 } }, 1e-12)
    end)

    for _, dtype in ipairs { "float32", "float64" } do
      it("gives Moore-Penrose inverses in " .. dtype .. ": full rank tall and wide, and rank-deficient", function()
        for _, sz in ipairs { { 5, 3 }, { 3, 5 } } do
          local m, n = sz[1], sz[2]
          local A = batch_of({ 2 }, function() return with_svals(m, n, { 2, 1.5, 1 }) end, dtype)
          for name, la in pairs(layouts(A)) do
            local P = linalg.pinv(la)
            assert.are.same({ 2, n, m }, P:shape())
            assert.are.equal(dtype, P:dtype())
            for b, Ab in ipairs(mats(A)) do
              local At = R.t(Ab)
              local want = m >= n and R.mm(R.inv(R.mm(At, Ab)), At) or R.mm(At, R.inv(R.mm(Ab, At)))
              R.near(mats(P)[b], want, tol[dtype] * 4, string.format("%dx%d %s %d", m, n, name, b))
            end
          end
        end
        -- rank 2 of 5x4: the four Penrose conditions
        local A = tensor_of({ R.mm(rmat(5, 2), rmat(2, 4)) }, {}, dtype)
        local Am, P = mats(A)[1], mats(linalg.pinv(A))[1]
        local AP, PA = R.mm(Am, P), R.mm(P, Am)
        R.near(R.mm(AP, Am), Am, tol[dtype] * 10, "A A+ A = A")
        R.near(R.mm(PA, P), P, tol[dtype] * 10, "A+ A A+ = A+")
        R.near(AP, R.t(AP), tol[dtype] * 10, "A A+ symmetric")
        R.near(PA, R.t(PA), tol[dtype] * 10, "A+ A symmetric")
      end)
    end

    it("counts the rank", function()
      local function rank(A, opts)
        local r = linalg.matrix_rank(A, opts)
        assert.are.equal("int64", r:dtype())
        return r
      end
      H.equal(rank(tide.eye(3, "float64")), 3)
      H.equal(rank(tide.tensor { { 1, 2 }, { 2, 4 } }), 1)
      H.equal(rank(tide.zeros(3, 4)), 0)
      H.equal(rank(tensor_of { R.mm(rmat(5, 2), rmat(2, 4)) }), 2)
      -- rank 3 in exact float32 values: the fourth row is the sum of the others
      H.equal(rank(tide.tensor { { 1, 0, 0, 1, 2, 3 }, { 0, 1, 0, 4, 5, 6 }, { 0, 0, 1, 7, 8, 9 }, { 1, 1, 1, 12, 15, 18 } }), 3)
      local D = tide.tensor({ { 1, 0 }, { 0, 1e-3 } }, "float64")
      H.equal(rank(D), 2)
      H.equal(rank(D, { tol = 1e-2 }), 1)
      H.equal(rank(D, { rtol = 1e-2 }), 1)
      H.equal(rank(D, { rtol = 1e-4 }), 2)
      H.equal(rank(D * 100, { tol = 1e-2 }), 2)
      local Sy = tide.tensor({ { 1, 0 }, { 0, -1e-3 } }, "float64")
      H.equal(rank(Sy, { hermitian = true }), 2)
      H.equal(rank(Sy, { hermitian = true, rtol = 1e-2 }), 1)
      local B = tide.stack { tide.eye(3, "float64"), tensor_of { R.mm(rmat(3, 1), rmat(1, 3)) } }
      H.equal(rank(B), { 3, 1 })
    end)

    it("takes vector right-hand sides and broadcasts batch dims in lstsq", function()
      local Am = with_svals(4, 3, { 2, 1.5, 1 })
      local A = tensor_of { Am }
      local x = linalg.lstsq(A, tide.tensor({ 1, 2, -1, 0.5 }, "float64"))
      assert.are.same({ 3 }, x:shape())
      local At = R.t(Am)
      R.near(R.column(vecs(x)[1]), R.solve(R.mm(At, Am), R.mm(At, R.column { 1, 2, -1, 0.5 })), 1e-11, "vector b")
      local Ab = batch_of({ 2, 1 }, function() return with_svals(4, 3, { 2, 1.5, 1 }) end)
      local Bb = batch_of({ 3 }, function() return rmat(4, 2) end)
      local Xb = linalg.lstsq(Ab, Bb)
      assert.are.same({ 2, 3, 3, 2 }, Xb:shape())
      local Ae, Be = mats(expand_batch(Ab, { 2, 3 })), mats(expand_batch(Bb, { 2, 3 }))
      for b, Xm in ipairs(mats(Xb)) do
        local T = R.t(Ae[b])
        R.near(Xm, R.solve(R.mm(T, Ae[b]), R.mm(T, Be[b])), 1e-11, "broadcast " .. b)
      end
      -- a batch of square A with a batch of vectors (B's dims are A's less one): solve's rule
      local Sq = batch_of({ 2 }, function() return general(3) end)
      local bs = tide.tensor({ { 1, 2, 3 }, { 0, -1, 1 } }, "float64")
      local xs = linalg.lstsq(Sq, bs)
      assert.are.same({ 2, 3 }, xs:shape())
      for b = 1, 2 do
        R.near(R.column(vecs(xs)[b]), R.solve(mats(Sq)[b], R.column(vecs(bs)[b])), 1e-11, "square batch " .. b)
      end
    end)

    for _, dtype in ipairs { "float32", "float64" } do
      it("solves least squares in " .. dtype .. ": tall (residual orthogonal to A) and wide (minimum norm)", function()
        local X = linalg.lstsq(tide.tensor({ { 1, 0 }, { 0, 1 }, { 1, 1 } }, dtype), tide.tensor({ { 1 }, { 2 }, { 4 } }, dtype))
        H.close(X, { { 4 / 3 }, { 7 / 3 } }, tol[dtype])
        for _, sz in ipairs { { 5, 3 }, { 3, 5 } } do
          local m, n = sz[1], sz[2]
          local A = batch_of({ 2 }, function() return with_svals(m, n, { 2, 1.5, 1 }) end, dtype)
          local B = batch_of({ 2 }, function() return rmat(m, 2) end, dtype)
          for name, la in pairs(layouts(A)) do
            local Xs = linalg.lstsq(la, B)
            assert.are.same({ 2, n, 2 }, Xs:shape())
            assert.are.equal(dtype, Xs:dtype())
            for b, Ab in ipairs(mats(A)) do
              local At, Bb = R.t(Ab), mats(B)[b]
              local want = m >= n and R.solve(R.mm(At, Ab), R.mm(At, Bb)) or R.mm(At, R.solve(R.mm(Ab, At), Bb))
              R.near(mats(Xs)[b], want, tol[dtype] * 4, string.format("%dx%d %s %d", m, n, name, b))
            end
          end
        end
      end)
    end
  end)

  describe("matrix_power, multi_dot, cond and norms", function()
    local function rnd3()
      local vals = H.nest(H.values(24, -1, 1, 77), { 3, 2, 4 })
      return { vals = vals, t = tide.tensor(vals, "float64") }
    end

    it("raises to integer powers, negative ones through the inverse", function()
      local Am = general(3)
      local A = tensor_of { Am }
      H.equal(linalg.matrix_power(A, 0), { { 1, 0, 0 }, { 0, 1, 0 }, { 0, 0, 1 } })
      H.equal(linalg.matrix_power(A, 1), A)
      R.near(mats(linalg.matrix_power(A, 3))[1], R.mm(R.mm(Am, Am), Am), 1e-12, "A^3")
      R.near(mats(A:matrix_power(5))[1], R.mm(R.mm(R.mm(R.mm(Am, Am), Am), Am), Am), 1e-12, "A^5")
      local Ai = R.inv(Am)
      R.near(mats(linalg.matrix_power(A, -1))[1], Ai, 1e-12, "A^-1")
      R.near(mats(linalg.matrix_power(A, -2))[1], R.mm(Ai, Ai), 1e-12, "A^-2")
      local Ab = batch_of({ 2 }, function() return general(2) end, "float32")
      local P = linalg.matrix_power(Ab, -3)
      for b, M in ipairs(mats(Ab)) do
        local Mi = R.inv(M)
        R.near(mats(P)[b], R.mm(R.mm(Mi, Mi), Mi), 1e-4, "batch " .. b .. " ^-3")
      end
      H.equal(linalg.matrix_power(Ab, 0), { { { 1, 0 }, { 0, 1 } }, { { 1, 0 }, { 0, 1 } } })
      assert.are.same({ 0, 0 }, linalg.matrix_power(tide.zeros(0, 0), 2):shape())
      assert.are.same({ 0, 3, 3 }, linalg.matrix_power(tide.zeros(0, 3, 3), -2):shape())
    end)

    it("multiplies chains with multi_dot, 1-d ends included", function()
      local Am, Bm, Cm, Dm = rmat(2, 5), rmat(5, 3), rmat(3, 4), rmat(4, 1)
      local A, B, C, D = tensor_of { Am }, tensor_of { Bm }, tensor_of { Cm }, tensor_of { Dm }
      R.near(mats(linalg.multi_dot { A, B })[1], R.mm(Am, Bm), 1e-14, "A B")
      R.near(mats(linalg.multi_dot { A, B, C, D })[1], R.mm(R.mm(R.mm(Am, Bm), Cm), Dm), 1e-14, "A B C D")
      local v = tide.tensor({ 1, -1 }, "float64")
      local r = linalg.multi_dot { v, A, B, D:view(-1):narrow(1, 1, 3) }
      assert.are.same({}, r:shape())
      local row = R.mm({ { 1, -1 } }, R.mm(Am, Bm))
      local want = 0
      for j = 1, 3 do want = want + row[1][j] * Dm[j][1] end
      H.close(r, want, 1e-13)
    end)

    it("gives the 2-norm condition number and the spectral and nuclear norms", function()
      local D = tide.tensor({ { 3, 0 }, { 0, -4 } }, "float64")
      H.close(linalg.cond(tide.tensor({ { 2, 0 }, { 0, 0.5 } }, "float64")), 4, 1e-14)
      H.close(linalg.matrix_norm(D, 2), 4, 1e-14)
      H.close(linalg.matrix_norm(D, -2), 3, 1e-14)
      H.close(linalg.matrix_norm(D, "nuc"), 7, 1e-14)
      H.close(linalg.matrix_norm(D, "nuc", nil, true), { { 7 } }, 1e-14)
      local A = batch_of({ 2 }, function() return rmat(3, 4) end)
      local n2, nm2, nuc, c = linalg.matrix_norm(A, 2), linalg.matrix_norm(A, -2), linalg.matrix_norm(A, "nuc"), linalg.cond(A)
      for b, Ab in ipairs(mats(A)) do
        local s = R.svdvals(Ab)
        R.near(H.flat(n2:totable())[b], s[1], 1e-12, "2-norm " .. b)
        R.near(H.flat(nm2:totable())[b], s[3], 1e-12, "-2-norm " .. b)
        R.near(H.flat(nuc:totable())[b], s[1] + s[2] + s[3], 1e-12, "nuclear " .. b)
        R.near(H.flat(c:totable())[b], s[1] / s[3], 1e-10, "cond " .. b)
      end
      -- the matrices in dims 1 and 3 of a [3, 2, 4] tensor
      local T3 = rnd3()
      local want = {}
      for j = 1, 2 do
        local M3 = {}
        for i = 1, 3 do M3[i] = {} for k = 1, 4 do M3[i][k] = T3.vals[i][j][k] end end
        want[j] = R.svdvals(M3)[1]
      end
      H.close(linalg.matrix_norm(T3.t, 2, { 1, 3 }), want, 1e-12)
      H.close(linalg.matrix_norm(T3.t, 2, { 1, 3 }, true), { { { want[1] }, { want[2] } } }, 1e-12)
      H.close(linalg.matrix_norm(T3.t, 2, { -1, -3 }), want, 1e-12)
      -- linalg.norm: a vector norm for 1-d or a dim, a matrix norm for 2-d
      local M = tide.tensor({ { 3, 0 }, { 4, -5 } }, "float64")
      H.close(linalg.norm(M), math.sqrt(50), 1e-14)
      H.close(linalg.norm(M, "fro"), math.sqrt(50), 1e-14)
      H.close(linalg.norm(M, 2), math.sqrt(45), 1e-14)
      H.close(linalg.norm(M, "nuc"), math.sqrt(45) + math.sqrt(5), 1e-14)
      H.close(linalg.norm(M, 1), 7, 1e-14)
      H.close(linalg.norm(M, 2, 1), { 5, 5 }, 1e-14)
      H.close(linalg.norm(M, 1, 2, true), { { 3 }, { 9 } }, 1e-14)
      H.close(linalg.norm(tide.tensor({ 1, -2, 2 }, "float64"), 3), (1 + 8 + 8) ^ (1 / 3), 1e-14)
    end)
  end)

  describe("errors", function()
    it("rejects bad shapes at once, naming the op and the shapes", function()
      local ones = tide.ones
      local cases = {
        { function() linalg.solve(ones(2, 3), ones(2, 1)) end, "linalg_solve: A must be square matrices, got shape [2,3]" },
        { function() linalg.solve(ones(3), ones(3)) end,
          "linalg_solve: A must have at least 2 dimensions (a matrix or a batch of them), got shape [3]" },
        { function() linalg.solve(ones(3, 3), ones(2, 2)) end,
          "linalg_solve: A of shape [3,3] is 3x3, so B must have 3 rows, got shape [2,2]" },
        { function() linalg.solve(ones(2, 3, 3), ones(3, 3, 1)) end,
          "linalg_solve: the batch dimensions of shapes [2,3,3] and [3,3,1] cannot be broadcast: 2 ~= 3" },
        { function() linalg.solve_triangular(ones(3, 2), ones(3, 1), { upper = true }) end,
          "linalg_solve_triangular: A must be square matrices, got shape [3,2]" },
        { function() linalg.solve_triangular(ones(3, 3), ones(4, 1), { upper = false }) end,
          "linalg_solve_triangular: A of shape [3,3] is 3x3, so B must have 3 rows, got shape [4,1]" },
        { function() linalg.cholesky(ones(3)) end,
          "linalg_cholesky: A must have at least 2 dimensions (a matrix or a batch of them), got shape [3]" },
        { function() linalg.cholesky(ones(2, 3)) end, "linalg_cholesky: A must be square matrices, got shape [2,3]" },
        { function() linalg.eigh(ones(4, 2, 3)) end, "linalg_eigh: A must be square matrices, got shape [4,2,3]" },
        { function() linalg.eigh(ones(3)) end,
          "linalg_eigh: A must have at least 2 dimensions (a matrix or a batch of them), got shape [3]" },
        { function() linalg.slogdet(ones(2, 3)) end, "linalg_slogdet: A must be square matrices, got shape [2,3]" },
        { function() linalg.qr(ones(3)) end,
          "linalg_qr: A must have at least 2 dimensions (a matrix or a batch of them), got shape [3]" },
        { function() linalg.svd(ones(3)) end,
          "linalg_svd: A must have at least 2 dimensions (a matrix or a batch of them), got shape [3]" },
      }
      local wrong = {}
      for i, case in ipairs(cases) do
        local got = message(case[1])
        if got ~= case[2] then wrong[#wrong + 1] = string.format("case %d: got %q, expected %q", i, got, case[2]) end
      end
      assert(#wrong == 0, table.concat(wrong, "\n"))
    end)

    it("names the problem and the shape in the functions built on the ops", function()
      local ones = tide.ones
      local cases = {
        { function() linalg.inv(ones(2, 3)) end, "inv", "square", "[2,3]" },
        { function() linalg.det(ones(2, 3)) end, "det", "square", "[2,3]" },
        { function() tide.logdet(ones(2, 3)) end, "logdet", "square", "[2,3]" },
        { function() linalg.eigvalsh(ones(2, 3)) end, "eigvalsh", "square", "[2,3]" },
        { function() linalg.matrix_power(ones(2, 3), 2) end, "matrix_power", "square", "[2,3]" },
        { function() linalg.det(ones(3)) end, "det", "at least 2 dimensions", "[3]" },
        { function() linalg.svdvals(ones(3)) end, "svdvals", "at least 2 dimensions", "[3]" },
        { function() linalg.pinv(ones(3)) end, "pinv", "at least 2 dimensions", "[3]" },
        { function() linalg.lstsq(ones(3, 2), ones(4, 1)) end, "lstsq", "3", "4" },
        { function() linalg.multi_dot { ones(2, 3), ones(4, 2) } end, "multi_dot", "3 ~= 4" },
      }
      local wrong = {}
      for i, case in ipairs(cases) do
        local ok, err = pcall(raises_with, case[1], unpack(case, 2))
        if not ok then wrong[#wrong + 1] = string.format("case %d: %s", i, tostring(err)) end
      end
      assert(#wrong == 0, table.concat(wrong, "\n"))
    end)

    it("rejects bad options, naming the function and the value", function()
      raises_with(function() linalg.qr(tide.ones(2, 2), "economic") end, "qr", "economic")
      raises_with(function() linalg.eigh(tide.ones(2, 2), "X") end, "eigh", "X")
      raises_with(function() linalg.eigvalsh(tide.ones(2, 2), "lower") end, "eigvalsh", "lower")
      raises_with(function() linalg.solve_triangular(tide.eye(2), tide.ones(2, 1)) end, "solve_triangular", "upper")
    end)

    it("names the zero pivot of A's own LU factorisation, whatever A's layout", function()
      -- the third column is zero, so A's third pivot is 0 whatever the rounding (A^T's
      -- LU finds its zero at pivot 2: its first two rows are proportional, in exact steps)
      local S3 = tide.tensor({ { 1, 2, 0 }, { 2, 4, 0 }, { 1, 1, 0 } }, "float64")
      local got = {}
      for name, la in pairs(layouts(S3)) do
        got[name] = message(function() linalg.solve(la, tide.ones(3, 1, "float64")):totable() end)
      end
      local want = "linalg_solve: the matrix is singular: pivot 3 of its LU factorisation is zero"
      assert.are.same({ contiguous = want, transposed = want, strided = want, narrowed = want }, got)
    end)

    it("reports a singular matrix when the solution is used, naming the pivot and the batch element", function()
      local S2 = tide.tensor { { 1, 2 }, { 2, 4 } }
      assert.are.equal("linalg_solve: the matrix is singular: pivot 2 of its LU factorisation is zero",
        message(function() linalg.solve(S2, tide.ones(2)):totable() end))
      raises_with(function() linalg.inv(S2):totable() end, "the matrix is singular: pivot 2 of its LU factorisation is zero")
      raises_with(function() linalg.inv(tide.zeros(2, 2)):totable() end, "pivot 1 of its LU factorisation is zero")
      -- element 2 of 3 is singular
      local Ab = tide.stack { tide.eye(2), S2, tide.eye(2) }
      assert.are.equal("linalg_solve: the matrix is singular: pivot 2 of its LU factorisation is zero (batch element 2 of 3)",
        message(function() linalg.solve(Ab, tide.ones(3, 2, 1)):totable() end))
      raises_with(function() linalg.inv(Ab):totable() end, "(batch element 2 of 3)")
      -- batch dims [2,2]: the fourth (row-major) is singular
      local A22 = tide.stack { tide.eye(2), tide.eye(2), tide.eye(2), S2 }:view(2, 2, 2, 2)
      assert.are.equal("linalg_solve: the matrix is singular: pivot 2 of its LU factorisation is zero (batch element 4 of 4)",
        message(function() linalg.solve(A22, tide.ones(2, 1)):totable() end))
      -- several singular: the first is named, whichever thread finds it
      local many = {}
      for b = 1, 40 do many[b] = (b == 7 or b == 30) and S2 or tide.eye(2) end
      for _ = 1, 3 do
        assert.are.equal("linalg_solve: the matrix is singular: pivot 2 of its LU factorisation is zero (batch element 7 of 40)",
          message(function() linalg.solve(tide.stack(many), tide.ones(2, 1)):totable() end))
      end
      -- and the next use of healthy tensors works
      H.close(linalg.solve(tide.eye(2), tide.ones(2)), { 1, 1 })
    end)

    it("reports a matrix that is not positive-definite, naming the leading minor and the batch element", function()
      local bad = tide.tensor { { 1, 2 }, { 2, 1 } }
      assert.are.equal("linalg_cholesky: the matrix is not positive-definite: its leading minor of order 2 is not",
        message(function() linalg.cholesky(bad):totable() end))
      assert.are.equal("linalg_cholesky: the matrix is not positive-definite: its leading minor of order 1 is not",
        message(function() linalg.cholesky(tide.tensor { { -1, 0 }, { 0, 1 } }, { upper = true }):totable() end))
      local Ab = tide.stack { tide.eye(2), tide.eye(2), bad, tide.eye(2) }
      assert.are.equal("linalg_cholesky: the matrix is not positive-definite: its leading minor of order 2 is not "
        .. "(batch element 3 of 4)", message(function() linalg.cholesky(Ab):totable() end))
      local many = {}
      for b = 1, 40 do many[b] = (b == 12 or b == 3) and bad or tide.eye(2) end
      assert.are.equal("linalg_cholesky: the matrix is not positive-definite: its leading minor of order 2 is not "
        .. "(batch element 3 of 40)", message(function() linalg.cholesky(tide.stack(many), { upper = true }):totable() end))
      -- the order counts from 1 in a 3x3 whose third minor fails
      local A3 = tide.tensor({ { 4, 2, 0 }, { 2, 3, 0 }, { 0, 0, -1 } }, "float64")
      assert.are.equal("linalg_cholesky: the matrix is not positive-definite: its leading minor of order 3 is not",
        message(function() tide.cholesky(A3):totable() end))
      -- NaN is not positive: the minor where it reaches the diagonal, as LAPACK's reference potrf says
      local nan = 0 / 0
      for _, dt in ipairs { "float32", "float64" } do
        assert.are.equal("linalg_cholesky: the matrix is not positive-definite: its leading minor of order 2 is not",
          message(function() linalg.cholesky(tide.tensor({ { 4, nan }, { nan, 4 } }, dt)):totable() end))
        assert.are.equal("linalg_cholesky: the matrix is not positive-definite: its leading minor of order 3 is not",
          message(function()
            linalg.cholesky(tide.tensor({ { 4, 2, 0 }, { 2, 3, 0 }, { 0, 0, nan } }, dt), { upper = true }):totable()
          end))
      end
    end)
  end)

  describe("gradients (float64, finite differences)", function()
    it("solve: both inputs, broadcast batch dims, left and right, vector B", function()
      local A = leaf(batch_of({ 2, 1 }, function() return general(3) end))
      local B = leaf(batch_of({ 2 }, function() return rmat(3, 2) end))
      assert.is_true(gradcheck(function(a, b) return linalg.solve(a, b) end, { A, B }))
      local A2, Bt = leaf(tensor_of { general(3) }), leaf(tensor_of { rmat(2, 3) })
      assert.is_true(gradcheck(function(a, b) return linalg.solve(a, b, { left = false }) end, { A2, Bt }))
      local v = leaf(tide.tensor({ 1, -2, 0.5 }, "float64"))
      assert.is_true(gradcheck(function(a, b) return linalg.solve(a, b) end, { A2, v }))
    end)

    it("solve_triangular: zero gradient on the triangle it does not read", function()
      local Am = rmat(3, 3)
      for i = 1, 3 do Am[i][i] = 2 + i / 3 end
      local A, B = leaf(tensor_of { Am }), leaf(tensor_of { rmat(3, 2) })
      local Bt = leaf(tensor_of { rmat(2, 3) })
      for _, upper in ipairs { true, false } do
        assert.is_true(gradcheck(function(a, b) return linalg.solve_triangular(a, b, { upper = upper }) end, { A, B }))
        assert.is_true(gradcheck(function(a, b)
          return linalg.solve_triangular(a, b, { upper = upper, left = false, unitriangular = true })
        end, { A, Bt }))
      end
    end)

    it("inv, det, slogdet's log|det| and logdet", function()
      local A = leaf(batch_of({ 2 }, function() return general(3) end))
      assert.is_true(gradcheck(function(a) return linalg.inv(a) end, { A }))
      assert.is_true(gradcheck(function(a) return linalg.det(a) end, { A }))
      assert.is_true(gradcheck(function(a) local _, l = linalg.slogdet(a); return l end, { A }))
      local N = leaf(tensor_of { rmat(3, 3, -2, 2) })
      assert.is_true(gradcheck(function(a) return linalg.det(a) end, { N }))
      assert.is_true(gradcheck(function(a) return (a:matmul(a:t()) + tide.eye(3, "float64")):logdet() end, { N }))
    end)

    it("det at singular matrices (a polynomial: its gradient is the adjugate's transpose)", function()
      local S = leaf(tide.tensor({ { 1, 2 }, { 2, 4 } }, "float64"))
      H.close(grad(linalg.det(S), S), { { 4, -2 }, { -2, 1 } }, 1e-12, 1e-12)
      local S3 = leaf(tensor_of { R.mm(rmat(3, 2), rmat(2, 3)) })
      assert.is_true(gradcheck(function(a) return linalg.det(a) end, { S3 }))
    end)

    it("cholesky, lower and upper, of X X^T + n I", function()
      local X = leaf(batch_of({ 2 }, function() return rmat(3, 3) end))
      local I = tide.eye(3, "float64") * 3
      for _, upper in ipairs { false, true } do
        assert.is_true(gradcheck(function(x)
          return linalg.cholesky(x:matmul(x:transpose(2, 3)) + I, { upper = upper })
        end, { X }))
      end
    end)

    it("eigh of (X + X^T) / 2: eigenvalues, eigenvectors and a sign-invariant loss", function()
      local X = leaf(batch_of({ 2 }, function(b)
        return R.add(with_eigs { -1.5, 0.5 + b / 4, 2.5 }, rmat(3, 3, -0.1, 0.1))
      end))
      local c = tide.tensor({ { 1, 2, 3 }, { -1, 0.5, 2 }, { 0.3, -2, 1 } }, "float64")
      local function sym(x) return (x + x:transpose(2, 3)) / 2 end
      assert.is_true(gradcheck(function(x) return { linalg.eigh(sym(x)) } end, { X }))
      assert.is_true(gradcheck(function(x)
        local w, V = linalg.eigh(sym(x))
        return (V * V * c):sum() + (w * tide.tensor({ 1, -2, 0.5 }, "float64")):sum()
      end, { X }))
      assert.is_true(gradcheck(function(x) return linalg.eigvalsh(sym(x), "U") end, { X }))
    end)

    it("qr, reduced: tall, wide and square", function()
      for _, sz in ipairs { { 4, 3 }, { 3, 4 }, { 3, 3 } } do
        local A = leaf(tensor_of { with_svals(sz[1], sz[2], { 2, 1.5, 1 }) })
        assert.is_true(gradcheck(function(a) return { linalg.qr(a) } end, { A }))
      end
      local A = leaf(tensor_of { with_svals(3, 3, { 2, 1.5, 1 }) })
      assert.is_true(gradcheck(function(a) return { linalg.qr(a, "complete") } end, { A }))
    end)

    it("svd and svdvals: distinct singular values, tall, wide and square", function()
      for _, sz in ipairs { { 4, 3 }, { 3, 4 }, { 3, 3 } } do
        local A = leaf(tensor_of { with_svals(sz[1], sz[2], { 3, 2, 1 }) })
        assert.is_true(gradcheck(function(a) return { linalg.svd(a, { full_matrices = false }) } end, { A }))
        assert.is_true(gradcheck(function(a) return linalg.svdvals(a) end, { A }))
        assert.is_true(gradcheck(function(a)
          local U, S, Vh = linalg.svd(a, { full_matrices = false })
          return { (U * S:unsqueeze(1)):matmul(Vh), (U * U):sum(2), (Vh * Vh):sum(1) }
        end, { A }))
      end
      local Q = leaf(tensor_of { with_svals(3, 3, { 3, 2, 1 }) })
      assert.is_true(gradcheck(function(a) return { linalg.svd(a) } end, { Q }))
    end)

    it("pinv, lstsq and matrix_power with negative k", function()
      for _, sz in ipairs { { 4, 3 }, { 3, 4 } } do
        local A = leaf(tensor_of { with_svals(sz[1], sz[2], { 2, 1.5, 1 }) })
        local B = leaf(tensor_of { rmat(sz[1], 2) })
        assert.is_true(gradcheck(function(a) return linalg.pinv(a) end, { A }))
        assert.is_true(gradcheck(function(a, b) return linalg.lstsq(a, b) end, { A, B }))
      end
      local A = leaf(tensor_of { general(3) })
      assert.is_true(gradcheck(function(a) return linalg.matrix_power(a, -2) end, { A }))
      assert.is_true(gradcheck(function(a) return linalg.matrix_power(a, 3) end, { A }))
      assert.is_true(gradcheck(function(a) return linalg.matrix_power(a, 0) * a end, { A }))
    end)

    it("second derivatives: a Hessian-vector product of logdet, and through grad of sum(inv(A))", function()
      local Am, Vm = general(3), rmat(3, 3)
      local A, V = leaf(tensor_of { Am }), tensor_of { Vm }
      local _, logabs = linalg.slogdet(A)
      local g = grad(logabs, A, nil, { create_graph = true })
      local Ai = R.inv(Am)
      R.near(mats(g)[1], R.t(Ai), 1e-12, "d log|det A| / dA = A^-T")
      assert.is_true(g.requires_grad)
      -- d/dA <A^-T, V> = -A^-T V^T A^-T
      local hv = grad((g * V):sum(), A)
      R.near(mats(hv)[1], R.scale(R.mm(R.mm(R.t(Ai), R.t(Vm)), R.t(Ai)), -1), 1e-12, "Hessian-vector product")
      assert.is_true(gradcheck(function(a)
        local ga = grad(linalg.inv(a):sum(), a, nil, { create_graph = true })
        return (ga * ga):sum()
      end, { leaf(tensor_of { general(3) }) }))
      assert.is_true(gradcheck(function(a)
        local ga = grad(linalg.cholesky(a:matmul(a:t()) + tide.eye(3, "float64")):sum(), a, nil, { create_graph = true })
        return ga
      end, { leaf(tensor_of { rmat(3, 3) }) }))
    end)

    it("refuses qr mode 'complete' of a tall matrix, and mode 'r' (no Q), as PyTorch", function()
      local A = leaf(tensor_of { rmat(4, 2) })
      raises_with(function()
        local Q = linalg.qr(A, "complete")
        Q:sum():backward()
      end, "qr")
      raises_with(function()
        local _, Rt = linalg.qr(A, "r")
        Rt:sum():backward()
      end, "qr", "'r'")
    end)
  end)

  it("replays a compiled solve and cholesky with new inputs as eager runs them", function()
    local function step(a, b)
      local L = linalg.cholesky(a)
      return linalg.solve(L, b), L
    end
    local f = tide.jit.compile(step)
    for call = 1, 5 do
      local A = batch_of({ 2 }, function() return spd(4) end, "float32")
      local B = batch_of({ 2 }, function() return rmat(4, 3) end, "float32")
      local X, L = f(A, B)
      local Xe, Le = step(A, B)
      H.equal(L, Le, "call " .. call .. " L")
      H.equal(X, Xe, "call " .. call .. " X")
      for b, Ab in ipairs(mats(A)) do
        local Lr = R.cholesky(Ab)
        R.near(mats(L)[b], Lr, tol.float32, "call " .. call .. " L " .. b)
        R.near(mats(X)[b], R.solve(Lr, mats(B)[b]), tol.float32 * 10, "call " .. call .. " X " .. b)
      end
    end
    assert.are.equal(1, f:stats().captures)
    assert.are.equal(3, f:stats().replays)
  end)
end)
