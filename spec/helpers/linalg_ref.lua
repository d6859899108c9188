--- Float64 references for the matrix decompositions, in plain Lua (no tide):
-- matrices are tables of rows. Gaussian elimination with partial pivoting (the
-- pivot LAPACK's getrf picks), Cholesky, Householder QR signed as LAPACK's
-- geqrf signs it, and cyclic Jacobi eigenvalues; the property checks (orthonormal
-- columns, triangles, residuals, the sign convention) raise an error that names
-- the place and the values. Meant for small, well-conditioned matrices only.
local R = {}

local abs, sqrt, max = math.abs, math.sqrt, math.max

local function dims(A) return #A, A[1] and #A[1] or 0 end

function R.zeros(m, n)
  local Z = {}
  for i = 1, m do
    Z[i] = {}
    for j = 1, n do Z[i][j] = 0 end
  end
  return Z
end

function R.eye(n)
  local E = R.zeros(n, n)
  for i = 1, n do E[i][i] = 1 end
  return E
end

function R.copy(A)
  local C = {}
  for i = 1, #A do C[i] = { unpack(A[i]) } end
  return C
end

function R.t(A)
  local m, n = dims(A)
  local T = R.zeros(n, m)
  for i = 1, m do for j = 1, n do T[j][i] = A[i][j] end end
  return T
end

function R.mm(A, B)
  local m, k = dims(A)
  local k2, n = dims(B)
  assert(k == k2, "R.mm: inner dims differ")
  local C = R.zeros(m, n)
  for i = 1, m do
    for j = 1, n do
      local s = 0
      for p = 1, k do s = s + A[i][p] * B[p][j] end
      C[i][j] = s
    end
  end
  return C
end

--- A + alpha * B
function R.add(A, B, alpha)
  alpha = alpha or 1
  local C = R.copy(A)
  for i = 1, #A do for j = 1, #A[i] do C[i][j] = A[i][j] + alpha * B[i][j] end end
  return C
end

function R.scale(A, s)
  local C = R.copy(A)
  for i = 1, #A do for j = 1, #A[i] do C[i][j] = A[i][j] * s end end
  return C
end

--- A with column j multiplied by d[j] (A diag(d))
function R.mdiag(A, d)
  local C = R.copy(A)
  for i = 1, #A do for j = 1, #d do C[i][j] = A[i][j] * d[j] end end
  return C
end

function R.column(v)
  local C = {}
  for i = 1, #v do C[i] = { v[i] } end
  return C
end

function R.maxabs(A)
  local s = 0
  for i = 1, #A do
    local r = A[i]
    if type(r) == "table" then for j = 1, #r do s = max(s, abs(r[j])) end else s = max(s, abs(r)) end
  end
  return s
end

-- -- elimination ------------------------------------------------------------------------

--- LU with partial pivoting (the first row of largest magnitude, as getrf's
-- idamax): returns the factors packed in one matrix, the row order, the sign of
-- the permutation and info (the first zero pivot, 1-based, or 0).
function R.lu(A)
  local n = #A
  local U, perm, sign, info = R.copy(A), {}, 1, 0
  for i = 1, n do perm[i] = i end
  for k = 1, n do
    local p, best = k, abs(U[k][k])
    for i = k + 1, n do if abs(U[i][k]) > best then p, best = i, abs(U[i][k]) end end
    if p ~= k then
      U[p], U[k] = U[k], U[p]
      perm[p], perm[k] = perm[k], perm[p]
      sign = -sign
    end
    if U[k][k] == 0 then
      if info == 0 then info = k end
    else
      for i = k + 1, n do
        local f = U[i][k] / U[k][k]
        U[i][k] = f
        for j = k + 1, n do U[i][j] = U[i][j] - f * U[k][j] end
      end
    end
  end
  return U, perm, sign, info
end

--- X with A X = B (B a matrix), or nil and the zero pivot when A is singular.
function R.solve(A, B)
  local n = #A
  local LU, perm, _, info = R.lu(A)
  if info > 0 then return nil, info end
  local k = #B[1]
  local X = R.zeros(n, k)
  for c = 1, k do
    local y = {}
    for i = 1, n do
      local s = B[perm[i]][c]
      for j = 1, i - 1 do s = s - LU[i][j] * y[j] end
      y[i] = s
    end
    for i = n, 1, -1 do
      local s = y[i]
      for j = i + 1, n do s = s - LU[i][j] * X[j][c] end
      X[i][c] = s / LU[i][i]
    end
  end
  return X
end

function R.inv(A) return R.solve(A, R.eye(#A)) end

function R.det(A)
  if #A == 0 then return 1 end
  local LU, _, sign = R.lu(A)
  local d = sign
  for i = 1, #A do d = d * LU[i][i] end
  return d
end

--- sign and log|det A|, as slogdet: 0 and -inf for a singular A
function R.slogdet(A)
  if #A == 0 then return 1, 0 end
  local LU, _, sign = R.lu(A)
  local s, l = sign, 0
  for i = 1, #A do
    local u = LU[i][i]
    if u == 0 then return 0, -math.huge end
    if u < 0 then s = -s end
    l = l + math.log(abs(u))
  end
  return s, l
end

--- X with A X = B for a triangular A, reading only its upper (or lower) triangle;
-- unit: the diagonal is taken as ones and not read.
function R.solve_triangular(A, B, upper, unit)
  local n, k = #A, #B[1]
  local X = R.zeros(n, k)
  for c = 1, k do
    local first, last, step = 1, n, 1
    if upper then first, last, step = n, 1, -1 end
    for i = first, last, step do
      local s = B[i][c]
      for j = first, i - step, step do s = s - A[i][j] * X[j][c] end
      X[i][c] = unit and s or s / A[i][i]
    end
  end
  return X
end

--- the lower Cholesky factor of A (read from its lower triangle), or nil and
-- the order of the first leading minor that is not positive
function R.cholesky(A)
  local n = #A
  local L = R.zeros(n, n)
  for j = 1, n do
    local d = A[j][j]
    for p = 1, j - 1 do d = d - L[j][p] * L[j][p] end
    if not (d > 0) then return nil, j end
    L[j][j] = sqrt(d)
    for i = j + 1, n do
      local s = A[i][j]
      for p = 1, j - 1 do s = s - L[i][p] * L[j][p] end
      L[i][j] = s / L[j][j]
    end
  end
  return L
end

-- -- orthogonal factorisations ------------------------------------------------------------

--- Householder QR as LAPACK's geqrf (dlarfg) signs it: R's diagonal entry j is
-- -sign(alpha) * |x| for the column x below it (alpha its first element), or
-- alpha itself where nothing below it is nonzero (the reflector is I). Returns
-- the complete Q (m x m) and R (m x n).
function R.qr(A)
  local m, n = dims(A)
  local Rm, Q = R.copy(A), R.eye(m)
  for j = 1, math.min(m, n) do
    local alpha, xnorm = Rm[j][j], 0
    for i = j + 1, m do xnorm = xnorm + Rm[i][j] ^ 2 end
    xnorm = sqrt(xnorm)
    if xnorm > 0 then
      local beta = -(alpha >= 0 and 1 or -1) * sqrt(alpha * alpha + xnorm * xnorm)
      local tau = (beta - alpha) / beta
      local v = { [j] = 1 }
      for i = j + 1, m do v[i] = Rm[i][j] / (alpha - beta) end
      -- Rm <- (I - tau v v^T) Rm, Q <- Q (I - tau v v^T)
      for c = j, n do
        local s = 0
        for i = j, m do s = s + v[i] * Rm[i][c] end
        for i = j, m do Rm[i][c] = Rm[i][c] - tau * v[i] * s end
      end
      for r = 1, m do
        local s = 0
        for i = j, m do s = s + Q[r][i] * v[i] end
        for i = j, m do Q[r][i] = Q[r][i] - tau * s * v[i] end
      end
      Rm[j][j] = beta
      for i = j + 1, m do Rm[i][j] = 0 end
    end
  end
  return Q, Rm
end

--- eigenvalues of a symmetric A, ascending, by cyclic Jacobi rotations
function R.eigvalsh(A)
  local n = #A
  local S = R.copy(A)
  for _ = 1, 100 do
    local off = 0
    for i = 1, n do for j = i + 1, n do off = off + S[i][j] ^ 2 end end
    if off < 1e-30 then break end
    for p = 1, n - 1 do
      for q = p + 1, n do
        if S[p][q] ~= 0 then
          local theta = (S[q][q] - S[p][p]) / (2 * S[p][q])
          local t = (theta >= 0 and 1 or -1) / (abs(theta) + sqrt(theta * theta + 1))
          local c = 1 / sqrt(t * t + 1)
          local s = t * c
          for k = 1, n do   -- S <- S J (columns p, q)
            local a, b = S[k][p], S[k][q]
            S[k][p], S[k][q] = c * a - s * b, s * a + c * b
          end
          for k = 1, n do   -- S <- J^T S (rows p, q)
            local a, b = S[p][k], S[q][k]
            S[p][k], S[q][k] = c * a - s * b, s * a + c * b
          end
        end
      end
    end
  end
  local w = {}
  for i = 1, n do w[i] = S[i][i] end
  table.sort(w)
  return w
end

--- singular values of A, descending, by one-sided Jacobi rotations of the
-- columns (of A or A^T, whichever has fewer), which keeps small singular values
-- accurate (the square roots of a Gram matrix's eigenvalues would not)
function R.svdvals(A)
  local m, n = dims(A)
  local W = m >= n and R.copy(A) or R.t(A)
  m, n = dims(W)
  for _ = 1, 100 do
    local rotated = false
    for p = 1, n - 1 do
      for q = p + 1, n do
        local a, b, c = 0, 0, 0
        for i = 1, m do
          a, b, c = a + W[i][p] ^ 2, b + W[i][q] ^ 2, c + W[i][p] * W[i][q]
        end
        if abs(c) > 1e-17 * sqrt(a * b) and c ~= 0 then
          rotated = true
          local zeta = (b - a) / (2 * c)
          local t = (zeta >= 0 and 1 or -1) / (abs(zeta) + sqrt(1 + zeta * zeta))
          local cs = 1 / sqrt(1 + t * t)
          local sn = cs * t
          for i = 1, m do
            local x, y = W[i][p], W[i][q]
            W[i][p], W[i][q] = cs * x - sn * y, sn * x + cs * y
          end
        end
      end
    end
    if not rotated then break end
  end
  local s = {}
  for j = 1, n do
    local v = 0
    for i = 1, m do v = v + W[i][j] ^ 2 end
    s[j] = sqrt(v)
  end
  table.sort(s, function(x, y) return x > y end)
  return s
end

-- -- checks -------------------------------------------------------------------------------

local function fail(msg, ...) error(string.format(msg, ...), 0) end

--- Asserts |got - want| <= tol * scale elementwise (scale: 1 or the largest
-- magnitude in want, whichever is larger); got and want are matrices, vectors
-- or numbers.
function R.near(got, want, tol, what)
  local scale = max(1, type(want) == "table" and R.maxabs(want) or abs(want))
  local function cmp(a, e, where)
    if type(e) == "table" then
      if type(a) ~= "table" or #a ~= #e then
        fail("%s: size %s ~= expected %d%s", what, type(a) == "table" and #a or type(a), #e, where)
      end
      for i = 1, #e do cmp(a[i], e[i], where .. "[" .. i .. "]") end
    elseif not (abs(a - e) <= tol * scale or (a ~= a and e ~= e) or a == e) then
      fail("%s%s: got %.17g, expected %.17g (tol %g)", what, where, a, e, tol * scale)
    end
  end
  cmp(got, want, "")
end

--- Asserts that the columns of Q (m x k) are orthonormal.
function R.check_orthonormal(Q, tol, what)
  R.near(R.mm(R.t(Q), Q), R.eye(#Q[1] or 0), tol, what .. " Q^T Q")
end

--- Asserts that the entries below (lower = false) or above (lower = true) the
-- diagonal are exactly zero.
function R.check_triangular(A, lower, what)
  for i = 1, #A do
    for j = 1, #A[i] do
      if (lower and j > i or not lower and j < i) and A[i][j] ~= 0 then
        fail("%s is not %s triangular: [%d][%d] = %.17g", what, lower and "lower" or "upper", i, j, A[i][j])
      end
    end
  end
end

--- Asserts that the first element of largest magnitude of each column of V is positive.
function R.check_signs(V, what)
  for j = 1, #V[1] do
    local bi, best = 1, -1
    for i = 1, #V do
      if abs(V[i][j]) > best then bi, best = i, abs(V[i][j]) end
    end
    if not (V[bi][j] > 0) then
      fail("%s column %d: its first element of largest magnitude, [%d] = %.17g, is not positive",
        what, j, bi, V[bi][j])
    end
  end
end

--- Asserts that v is sorted ascending (or descending).
function R.check_sorted(v, descending, what)
  for i = 2, #v do
    if descending and v[i] > v[i - 1] or not descending and v[i] < v[i - 1] then
      fail("%s is not %s: [%d] = %.17g, [%d] = %.17g", what, descending and "descending" or "ascending",
        i - 1, v[i - 1], i, v[i])
    end
  end
end

return R
