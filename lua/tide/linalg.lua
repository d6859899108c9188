--- tide.linalg: solvers and decompositions, as torch.linalg. Eight ops of the
-- registry do the work (linalg_solve, linalg_solve_triangular, linalg_det,
-- linalg_slogdet, linalg_cholesky, linalg_eigh, linalg_qr, linalg_svd: LAPACK on the CPU,
-- cuSOLVER on CUDA, each differentiable); everything else here composes them,
-- so autograd, every device and tide.jit take it unchanged. Also Torch7's and
-- PyTorch's older names (tide.inverse, tide.svd with V, t:det(), ...).
-- Called once, by init.lua: require("tide.linalg")(tide, methods).
local B = require "bindings.ffi"
local args = require "tide.args"
local T = require "tide.tensor"
local fail = B.fail
local fmt, huge = string.format, math.huge

local need_tensor, options = args.need_tensor, args.options

-- x as matrices: `what` names the argument (A, B, L), as the ops' shape rules do.
local function need_matrix(x, name, what, square)
  need_tensor(x, name, what)
  local shape = "[" .. table.concat(x:shape(), ",") .. "]"
  if x:dim() < 2 then
    fail(fmt("%s: %s must have at least 2 dimensions (a matrix or a batch of them), got shape %s", name, what, shape))
  end
  if square and x:size(-1) ~= x:size(-2) then
    fail(fmt("%s: %s must be square matrices, got shape %s", name, what, shape))
  end
  return x
end

local function flag(v, name, what)
  if v ~= nil and type(v) ~= "boolean" then fail(fmt("%s: %s must be a boolean, got %s", name, what, type(v))) end
  return v
end

-- Runs registry op `op` on the tensors of `inputs` with params ints (0/1 for booleans).
local function call(op, inputs, ints)
  local p = T.new_params()
  if ints then
    p.n_ints = #ints
    for i = 1, #ints do p.ints[i - 1] = ints[i] end
  end
  for i = 1, #inputs do T.ins_set(i - 1, inputs[i]) end
  return T.run(T.op_ids[op], #inputs, p, nil)
end

local function mT(x) return x:transpose(-2, -1) end

-- The floating dtype a decomposition of x computes in and returns.
local function float_dtype(x)
  local d = x:dtype()
  if d == "float64" or d == "float32" or d == "float16" or d == "bfloat16" then return d end
  return "float32"
end

-- Machine epsilon of a floating dtype, as torch.finfo(dtype).eps.
local EPS = { float64 = 2.220446049250313e-16, float32 = 1.1920928955078125e-07, float16 = 9.765625e-04,
              bfloat16 = 7.8125e-03 }

return function(tide, methods)
  local linalg = tide.linalg or {}
  tide.linalg = linalg
  local function eye(x, n) return tide.eye(n, { dtype = float_dtype(x), device = x:device() }) end
  -- Defines tide[name] and methods[name] where the names are free.
  local function define(name, f, as_method)
    if tide[name] == nil then tide[name] = f end
    if as_method and methods[name] == nil then methods[name] = f end
  end
  --- t:mT(): the matrices of t transposed (its last two dims), a view, as PyTorch's t.mT.
  define("mT", function(x) return mT(need_tensor(x, "mT")) end, true)

  -- B as a batch of vectors (torch.linalg.solve's rule): 1-d, or A's shape without its last dim.
  local function is_vector_rhs(A, Bm)
    if Bm:dim() == 1 then return true end
    if Bm:dim() ~= A:dim() - 1 then return false end
    for d = 1, Bm:dim() do if Bm:size(d) ~= A:size(d) then return false end end
    return true
  end

  --- linalg.solve(A, B, {left=true}): X with A X = B (left=false: X A = B), by LU
  -- with partial pivoting. A [..., n, n]; B [..., n, k], or [..., n] (then X is
  -- too); batch dims broadcast. A singular A is an error.
  local function solve(A, Bm, opts)
    need_matrix(A, "linalg_solve", "A", true)
    need_tensor(Bm, "linalg.solve", 2)
    opts = options(opts, "linalg.solve", { left = true })
    if flag(opts.left, "linalg.solve", "left") == false then   -- X A = B: A^T X^T = B^T
      if is_vector_rhs(A, Bm) then return call("linalg_solve", { mT(A), Bm:unsqueeze(-1) }):squeeze(-1) end
      need_matrix(Bm, "linalg_solve", "B")
      return mT(call("linalg_solve", { mT(A), mT(Bm) }))
    end
    if is_vector_rhs(A, Bm) then return call("linalg_solve", { A, Bm:unsqueeze(-1) }):squeeze(-1) end
    need_matrix(Bm, "linalg_solve", "B")
    return call("linalg_solve", { A, Bm })
  end
  linalg.solve = solve

  --- linalg.solve_triangular(A, B, {upper=, left=true, unitriangular=false}): X
  -- with A X = B (left=false: X A = B) for a triangular A, of which only the
  -- upper (or lower) triangle is read; unitriangular takes its diagonal as ones.
  local function solve_triangular(A, Bm, opts)
    local name = "linalg.solve_triangular"
    need_matrix(A, "linalg_solve_triangular", "A", true)
    need_matrix(Bm, "linalg_solve_triangular", "B")
    opts = options(opts, name, { upper = true, left = true, unitriangular = true })
    if type(opts.upper) ~= "boolean" then fail(name .. ": the option upper (a boolean) is required") end
    flag(opts.unitriangular, name, "unitriangular")
    local unit = opts.unitriangular and 1 or 0
    if flag(opts.left, name, "left") == false then
      return mT(call("linalg_solve_triangular", { mT(A), mT(Bm) }, { opts.upper and 0 or 1, unit }))
    end
    return call("linalg_solve_triangular", { A, Bm }, { opts.upper and 1 or 0, unit })
  end
  linalg.solve_triangular = solve_triangular

  --- linalg.inv(A): the inverse of the square matrices A [..., n, n]; a singular one
  -- is an error. Also tide.inverse(A) and A:inverse().
  local function inv(A)
    need_matrix(A, "linalg.inv", "A", true)
    return call("linalg_solve", { A, eye(A, A:size(-1)) })
  end
  linalg.inv = inv
  define("inverse", inv, true)

  --- linalg.slogdet(A): sign and log |det A| of A [..., n, n] (a singular A: 0 and -inf).
  local function slogdet(A)
    need_matrix(A, "linalg_slogdet", "A", true)
    return call("linalg_slogdet", { A })
  end
  linalg.slogdet = slogdet
  define("slogdet", slogdet, true)
  --- linalg.det(A): the determinant, from the LU factorisation. Its gradient comes
  -- from the SVD, so that singular matrices have one too. Also A:det().
  local function det(A)
    need_matrix(A, "linalg_det", "A", true)
    return call("linalg_det", { A })
  end
  linalg.det = det
  define("det", det, true)
  --- logdet(A): log det A: NaN where det A < 0, -inf where it is 0, as torch.logdet.
  define("logdet", function(A)
    need_matrix(A, "logdet", "A", true)
    local sign, logabs = call("linalg_slogdet", { A })
    return tide.where(sign:lt(0), 0 / 0, logabs)
  end, true)

  --- linalg.cholesky(A, {upper=false}): L, lower triangular, with A = L L^T, from
  -- A's lower triangle (upper=true: U = L^T from A's upper triangle). A matrix that
  -- is not positive-definite is an error. Also tide.cholesky(A, upper), A:cholesky(upper).
  local function cholesky(A, upper, name)
    need_matrix(A, "linalg_cholesky", "A", true)
    return call("linalg_cholesky", { A }, { flag(upper, name, "upper") and 1 or 0 })
  end
  linalg.cholesky = function(A, opts)
    opts = options(opts, "linalg.cholesky", { upper = true })
    return cholesky(A, opts.upper, "linalg.cholesky")
  end
  define("cholesky", function(A, upper) return cholesky(A, upper, "cholesky") end, true)
  --- cholesky_solve(B, L, upper=false): X with A X = B, for A = L L^T (upper: U^T U).
  local function cholesky_solve(Bm, L, upper)
    need_matrix(Bm, "cholesky_solve", "B")
    need_matrix(L, "cholesky_solve", "L", true)
    local u = flag(upper, "cholesky_solve", "upper") and 1 or 0
    local Lt = mT(L)
    local y = call("linalg_solve_triangular", { u == 1 and Lt or L, Bm }, { 0, 0 })
    return call("linalg_solve_triangular", { u == 1 and L or Lt, y }, { 1, 0 })
  end
  define("cholesky_solve", cholesky_solve, true)
  --- cholesky_inverse(L, upper=false): the inverse of A = L L^T (upper: U^T U).
  define("cholesky_inverse", function(L, upper)
    need_matrix(L, "cholesky_inverse", "L", true)
    return cholesky_solve(eye(L, L:size(-1)), L, upper)
  end, true)

  local function uplo_arg(uplo, name)
    if uplo == nil or uplo == "L" then return 0 end
    if uplo == "U" then return 1 end
    fail(fmt("%s: UPLO must be 'L' or 'U', got %s", name, tostring(uplo)))
  end
  --- linalg.eigh(A, UPLO='L'): eigenvalues (ascending) and eigenvectors (as
  -- columns) of the symmetric matrices A [..., n, n], read from the lower (or
  -- upper) triangle. Each eigenvector is signed so that its first element of
  -- largest magnitude is positive, so the CPU and CUDA agree.
  linalg.eigh = function(A, uplo)
    need_matrix(A, "linalg_eigh", "A", true)
    return call("linalg_eigh", { A }, { uplo_arg(uplo, "linalg.eigh") })
  end
  --- linalg.eigvalsh(A, UPLO='L'): the eigenvalues alone.
  linalg.eigvalsh = function(A, uplo)
    need_matrix(A, "linalg.eigvalsh", "A", true)
    return (call("linalg_eigh", { A }, { uplo_arg(uplo, "linalg.eigvalsh") }))
  end

  local QR_MODES = { reduced = 0, complete = 1, r = 2 }
  --- linalg.qr(A, mode='reduced'): Q and R with A = Q R for A [..., m, n]:
  -- 'reduced' Q [..., m, k], R [..., k, n] (k = min(m, n)); 'complete' Q
  -- [..., m, m], R [..., m, n]; 'r' R alone (Q is an empty tensor).
  linalg.qr = function(A, mode)
    need_matrix(A, "linalg_qr", "A")
    local m = QR_MODES[mode or "reduced"]
    if not m then fail(fmt("linalg.qr: mode must be 'reduced', 'complete' or 'r', got %s", tostring(mode))) end
    return call("linalg_qr", { A }, { m })
  end
  --- qr(A, some=true): torch.qr: reduced Q and R, or complete ones with some=false.
  define("qr", function(A, some)
    return linalg.qr(A, flag(some, "qr", "some") == false and "complete" or "reduced")
  end, true)

  --- linalg.svd(A, {full_matrices=true}): U, S, Vh with A = U diag(S) Vh, S
  -- descending; full_matrices=false gives U [..., m, k] and Vh [..., k, n]. Each
  -- column of U is signed so that its first element of largest magnitude is
  -- positive, with Vh's matching row.
  linalg.svd = function(A, opts)
    need_matrix(A, "linalg_svd", "A")
    opts = options(opts, "linalg.svd", { full_matrices = true })
    return call("linalg_svd", { A }, { flag(opts.full_matrices, "linalg.svd", "full_matrices") == false and 0 or 1, 1 })
  end
  --- linalg.svdvals(A): the singular values, descending. Its gradient needs U and
  -- V, so they are computed when A requires grad.
  local function svdvals(A, name)
    need_matrix(A, name or "linalg.svdvals", "A")
    local uv = A.requires_grad and tide.is_grad_enabled() and 1 or 0
    local _, S = call("linalg_svd", { A }, { 0, uv })
    return S
  end
  linalg.svdvals = function(A) return svdvals(A) end
  --- svd(A, some=true): torch.svd: U, S and V (not Vh), reduced unless some=false.
  define("svd", function(A, some)
    need_matrix(A, "svd", "A")
    local U, S, Vh = call("linalg_svd", { A }, { flag(some, "svd", "some") == false and 1 or 0, 1 })
    return U, S, mT(Vh)
  end, true)

  -- The cutoff below which singular values (or |eigenvalues|) count as zero:
  -- max(atol, rtol * largest), rtol defaulting to eps * max(m, n) when neither is given.
  local function cutoff(A, S, opts, name)
    local atol, rtol = opts.atol, opts.rtol
    if opts.tol ~= nil then atol = opts.tol end
    for _, v in ipairs { atol or 0, rtol or 0 } do
      if type(v) ~= "number" then fail(fmt("%s: atol and rtol must be numbers, got %s", name, type(v))) end
    end
    if rtol == nil then rtol = atol and atol > 0 and 0 or EPS[float_dtype(A)] * math.max(A:size(-1), A:size(-2)) end
    local top = S:size(-1) > 0 and S:amax(-1, true) or S:sum(-1, true)
    return tide.clamp(top * rtol, atol or 0)
  end

  --- linalg.pinv(A, {rtol=, atol=, hermitian=false}): the pseudo-inverse of A
  -- [..., m, n] from its SVD (hermitian: its eigendecomposition), singular values
  -- at or below the cutoff taken as zero. Also A:pinverse().
  linalg.pinv = function(A, opts)
    need_matrix(A, "linalg.pinv", "A")
    opts = options(opts, "linalg.pinv", { rtol = true, atol = true, hermitian = true })
    if flag(opts.hermitian, "linalg.pinv", "hermitian") then
      need_matrix(A, "linalg.pinv", "A", true)
      local w, V = call("linalg_eigh", { A }, { 0 })
      local keep = w:abs():gt(cutoff(A, w:abs(), opts, "linalg.pinv"))
      local winv = tide.where(keep, 1 / tide.where(keep, w, 1), 0)
      return (V * winv:unsqueeze(-2)):matmul(mT(V))
    end
    local U, S, Vh = call("linalg_svd", { A }, { 0, 1 })
    local keep = S:gt(cutoff(A, S, opts, "linalg.pinv"))
    local sinv = tide.where(keep, 1 / tide.where(keep, S, 1), 0)
    return (mT(Vh) * sinv:unsqueeze(-2)):matmul(mT(U))
  end
  define("pinverse", function(A, rcond) return linalg.pinv(A, rcond and { rtol = rcond } or nil) end, true)

  --- linalg.matrix_rank(A, {atol=, rtol=, hermitian=false}): how many singular values
  -- exceed the cutoff (see pinv), as int64.
  linalg.matrix_rank = function(A, opts)
    need_matrix(A, "linalg.matrix_rank", "A")
    opts = options(opts, "linalg.matrix_rank", { rtol = true, atol = true, tol = true, hermitian = true })
    local S
    if flag(opts.hermitian, "linalg.matrix_rank", "hermitian") then
      S = (linalg.eigvalsh(A)):abs()
    else
      S = svdvals(A, "linalg.matrix_rank")
    end
    return S:gt(cutoff(A, S, opts, "linalg.matrix_rank")):sum(-1)
  end

  --- linalg.lstsq(A, B): the least-squares solution X of A X = B for A [..., m, n]
  -- of full rank, by QR: m >= n minimises |A X - B|, m < n gives the solution of
  -- least norm. B [..., m, k] or [..., m]. Returns X alone (torch's .solution).
  linalg.lstsq = function(A, Bm)
    need_matrix(A, "linalg.lstsq", "A")
    need_tensor(Bm, "linalg.lstsq", 2)
    local vec = is_vector_rhs(A, Bm)
    if vec then Bm = Bm:unsqueeze(-1) end
    need_matrix(Bm, "linalg.lstsq", "B")
    if Bm:size(-2) ~= A:size(-2) then
      fail(fmt("linalg.lstsq: A has %d rows but B has %d", A:size(-2), Bm:size(-2)))
    end
    local X
    if A:size(-2) >= A:size(-1) then
      local Q, R = call("linalg_qr", { A }, { 0 })
      X = call("linalg_solve_triangular", { R, mT(Q):matmul(Bm) }, { 1, 0 })
    else
      local Q, R = call("linalg_qr", { mT(A) }, { 0 })
      X = Q:matmul(call("linalg_solve_triangular", { mT(R), Bm }, { 0, 0 }))
    end
    return vec and X:squeeze(-1) or X
  end

  --- linalg.matrix_power(A, k): A multiplied by itself k times (k = 0: the identity,
  -- k < 0: the inverse's power), by repeated squaring. Also A:matrix_power(k).
  local function matrix_power(A, k)
    need_matrix(A, "linalg.matrix_power", "A", true)
    if type(k) ~= "number" or k ~= math.floor(k) then
      fail("linalg.matrix_power: k must be an integer, got " .. tostring(k))
    end
    if k == 0 then
      local I = tide.eye(A:size(-1), { dtype = A:dtype(), device = A:device() })
      return I:expand(A:shape()):clone()
    end
    if k < 0 then A, k = inv(A), -k end
    local result, base = nil, A
    while k > 0 do
      if k % 2 == 1 then result = result and result:matmul(base) or base end
      k = math.floor(k / 2)
      if k > 0 then base = base:matmul(base) end
    end
    return result
  end
  linalg.matrix_power = matrix_power
  define("matrix_power", matrix_power, true)

  --- linalg.multi_dot({A, B, C, ...}): their product, in the order of fewest
  -- multiplications; a 1-d first (last) tensor is a row (column) vector.
  linalg.multi_dot = function(list)
    if type(list) ~= "table" or #list < 2 then fail("linalg.multi_dot: expects a table of at least two tensors") end
    local ms, n = {}, #list
    for i, x in ipairs(list) do
      need_tensor(x, "linalg.multi_dot", i)
      local d = x:dim()
      if d == 1 and (i == 1 or i == n) then
        x = i == 1 and x:unsqueeze(1) or x:unsqueeze(2)
      elseif d ~= 2 then
        fail(fmt("linalg.multi_dot: tensor %d must be 2-d (the first and last may be 1-d), got %d-d", i, d))
      end
      if i > 1 and ms[i - 1]:size(2) ~= x:size(1) then
        fail(fmt("linalg.multi_dot: tensors %d and %d cannot be multiplied: %d ~= %d", i - 1, i, ms[i - 1]:size(2),
          x:size(1)))
      end
      ms[i] = x
    end
    -- the matrix-chain order: cost[i][j] of the product of ms[i..j], split[i][j] where
    local dims, cost, split = { ms[1]:size(1) }, {}, {}
    for i = 1, n do dims[i + 1] = ms[i]:size(2); cost[i], split[i] = { [i] = 0 }, {} end
    for len = 2, n do
      for i = 1, n - len + 1 do
        local j = i + len - 1
        cost[i][j] = huge
        for s = i, j - 1 do
          local c = cost[i][s] + cost[s + 1][j] + dims[i] * dims[s + 1] * dims[j + 1]
          if c < cost[i][j] then cost[i][j], split[i][j] = c, s end
        end
      end
    end
    local function product(i, j)
      if i == j then return ms[i] end
      return product(i, split[i][j]):matmul(product(split[i][j] + 1, j))
    end
    local r = product(1, n)
    if list[n]:dim() == 1 then r = r:squeeze(2) end
    if list[1]:dim() == 1 then r = r:squeeze(1) end
    return r
  end

  --- linalg.matrix_norm gains ord = 2 (the largest singular value), -2 (the
  -- smallest) and 'nuc' (their sum).
  local matrix_norm = linalg.matrix_norm
  linalg.matrix_norm = function(A, ord, dim, keepdim)
    if ord ~= 2 and ord ~= -2 and ord ~= "nuc" then return matrix_norm(A, ord, dim, keepdim) end
    need_matrix(A, "matrix_norm", "A")
    dim = dim or { -2, -1 }
    if type(dim) ~= "table" or #dim ~= 2 then fail("matrix_norm: dim must be a table of two dims") end
    local nd = A:dim()
    local r, c = dim[1] < 0 and nd + dim[1] + 1 or dim[1], dim[2] < 0 and nd + dim[2] + 1 or dim[2]
    local moved = tide.movedim(A, { r, c }, { nd - 1, nd })
    local S = svdvals(moved, "matrix_norm")
    local v = ord == "nuc" and S:sum(-1) or ord == 2 and S:amax(-1) or S:amin(-1)
    if keepdim then v = v:unsqueeze(math.min(r, c)):unsqueeze(math.max(r, c)) end
    return v
  end

  --- linalg.norm(A, ord, dim, keepdim): a vector norm for a number dim (or a 1-d A
  -- without dim), a matrix norm for two dims (or a 2-d A with ord), else the
  -- 2-norm of all elements.
  linalg.norm = function(A, ord, dim, keepdim)
    need_tensor(A, "linalg.norm", 1)
    if type(dim) == "table" and #dim == 2 then return linalg.matrix_norm(A, ord or "fro", dim, keepdim) end
    if dim == nil and ord ~= nil and A:dim() == 2 then return linalg.matrix_norm(A, ord, nil, keepdim) end
    return linalg.vector_norm(A, ord or 2, dim, keepdim)
  end

  --- linalg.cond(A, p=nil): the condition number: largest over smallest singular
  -- value (p nil or 2; -2 the inverse), or norm(A, p) * norm(inv(A), p) for
  -- 'fro', 'nuc', 1, -1, math.huge, -math.huge.
  linalg.cond = function(A, p)
    need_matrix(A, "linalg.cond", "A")
    if p == nil or p == 2 or p == -2 then
      local S = svdvals(A, "linalg.cond")
      local hi, lo = S:amax(-1), S:amin(-1)
      return p == -2 and lo / hi or hi / lo
    end
    need_matrix(A, "linalg.cond", "A", true)
    return linalg.matrix_norm(A, p) * linalg.matrix_norm(inv(A), p)
  end
end
