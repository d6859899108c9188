-- The registry's ops on a CUDA device against the same ops on the CPU: every
-- kernel of libtide_cuda on contiguous, transposed, broadcast, empty and 0-d
-- inputs, in the dtypes it accepts, and random ops drawing the same numbers
-- on either device for a seed. Tagged #cuda: where no CUDA device is usable,
-- each case prints why it was skipped and checks nothing else
-- (spec/helpers/cuda_compare.lua).
local tide = require "tide"

local C = require "spec.helpers.cuda_compare"
local on_gpu, same, layouts, both, EXACT, DEV = C.on_gpu, C.same, C.layouts, C.both, C.EXACT, C.DEV

describe("CUDA kernels against the CPU's", function()
  on_gpu("unary ops in every layout and float dtype", function()
    local ops = { "neg", "abs", "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid",
                  "relu", "gelu", "silu", "floor", "ceil", "round", "sign", "reciprocal", "trunc", "tan", "asin",
                  "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "erf", "erfc", "erfinv", "log2",
                  "log10", "exp2", "lgamma", "digamma", "i0", "i0e", "i1", "i1e" }
    for _, dt in ipairs { "float32", "float64", "float16", "bfloat16" } do
      for lname, x in pairs(layouts(dt)) do
        for _, op in ipairs(ops) do
          both(function(t) return t[op](t) end, ("%s of %s %s"):format(op, lname, dt), x)
        end
        for _, n in ipairs { 0, 1, 2, 5, 70 } do
          both(function(t) return t:polygamma(n) end, ("polygamma %d of %s %s"):format(n, lname, dt), x)
        end
      end
    end
    -- the poles, the infinities, and both sides of zero
    local special = tide.tensor({ 0, -0.0, -1, -2, 1, 2, 0.5, -0.5, 1e-300, 1e300, math.huge, -math.huge, 0 / 0 },
      "float64")
    for _, n in ipairs { 0, 1, 2, 3 } do
      both(function(t) return t:polygamma(n) end, "polygamma " .. n .. " at the poles", special)
    end
    both(function(t) return t:lgamma() end, "lgamma at the poles", special)
    for _, op in ipairs { "i0", "i0e", "i1", "i1e" } do   -- and the series/Chebyshev seam, the overflow
      both(function(t) return t[op](t) end, op .. " at special values",
        tide.tensor({ 0, -0.0, 8, -8, 8.000001, 700, 710, -713, 1e300, math.huge, -math.huge, 0 / 0 }, "float64"))
    end
  end)

  on_gpu("sort, topk, the scans and searchsorted along each dim, in every layout and dtype", function()
    for _, dt in ipairs { "float32", "float64", "float16", "int32", "int64", "uint8" } do
      for lname, x in pairs(layouts(dt)) do
        local dims = x:dim() == 0 and { 1 } or { 1, 2, -1 }
        for _, d in ipairs(dims) do
          local what = ("%s %s dim %d"):format(lname, dt, d)
          for _, desc in ipairs { false, true } do
            both(function(t) return (t:sort(d, desc)) end, "sort values " .. what, x)
            both(function(t) local _, i = t:sort(d, desc); return i end, "sort indices " .. what, x)
          end
          local n = x:dim() == 0 and 1 or x:size(d)
          for _, k in ipairs(x:dim() == 0 and { 1 } or n == 0 and { 0 } or { 0, 1, n }) do
            both(function(t) return (t:topk(k, d)) end, ("topk %d values %s"):format(k, what), x)
            both(function(t) local _, i = t:topk(k, d, false); return i end, ("topk %d indices %s"):format(k, what), x)
          end
          both(function(t) return t:cumprod(d) end, "cumprod " .. what, x)
          both(function(t) return (t:cummax(d)) end, "cummax values " .. what, x)
          both(function(t) local _, i = t:cummin(d); return i end, "cummin indices " .. what, x)
        end
        if x:dim() == 2 then
          local seq = x:sort(2)
          both(function(s, v) return tide.searchsorted(s, v) end, "searchsorted rows " .. lname .. " " .. dt, seq, x)
          if x:size(1) > 0 then
            both(function(s, v) return tide.searchsorted(s, v, { right = true }) end, "searchsorted right " .. dt,
              seq:select(1, 1), x)
          end
        end
      end
    end
    -- NaN, infinities and ties: the same order and indices on both devices
    local special = tide.tensor({ { 3, 0 / 0, -1, 3, math.huge, -0.0, 0, -math.huge, 0 / 0, 3 } })
    for _, desc in ipairs { false, true } do
      both(function(t) local _, i = t:sort(2, desc); return i end, "sort of NaN and ties", special)
    end
    both(function(t) local _, i = t:cummax(2); return i end, "cummax of NaN and ties", special)
    -- a long line: CUB's large-segment path
    tide.manual_seed(5)
    local long = tide.randn(3, 50000):round()
    both(function(t) local _, i = t:sort(2); return i end, "sort of 3 lines of 50000 with ties", long)
    both(function(t) local _, i = t:topk(7, 2); return i end, "topk of 3 lines of 50000 with ties", long)
  end)

  on_gpu("binary ops with broadcasting, host numbers and promotion", function()
    local ops = { "add", "sub", "mul", "div", "pow", "fmod", "remainder", "floor_divide", "maximum", "minimum", "eq", "ne", "lt",
                  "le", "gt", "ge" }
    for _, dt in ipairs { "float32", "float64", "int32", "int64", "float16" } do
      local L = layouts(dt)
      local row = tide.arange(1, 6):to(dt)
      for _, op in ipairs(ops) do
        local skip = (op == "div" or op == "pow") and EXACT[dt]
        if not skip then
          both(function(a, b) return tide[op](a, b) end, op .. " " .. dt, L.contiguous, L.transposed:t())
          both(function(a, b) return tide[op](a, b) end, op .. " broadcast " .. dt, L.strided, row)
          both(function(a) return tide[op](a, 3) end, op .. " host number " .. dt, L.contiguous)
          both(function(a, b) return tide[op](a, b) end, op .. " empty " .. dt, L.empty, row)
        end
      end
    end
    for _, dt in ipairs { "float32", "float64" } do   -- squares are x * x on both devices, to the bit
      both(function(a) return a:pow(2) end, "pow 2 " .. dt, layouts(dt).strided)
    end
    both(function(a, b) return a + b end, "int32 + float32", layouts("int32").contiguous, layouts("float32").contiguous)
    both(function(a, b) return tide.where(a:gt(0), a, b) end, "where", layouts("float32").contiguous,
      layouts("float32").transposed:t())
    both(function(a) return a:clamp(-1, 2) end, "clamp", layouts("float32").strided)
    both(function(a, b, c) return a:addcmul(b, c, 0.5) end, "addcmul", layouts("float32").contiguous,
      layouts("float32").strided, tide.ones(5))
    both(function(a, b) return a:lerp(b, 0.25) end, "lerp", layouts("float32").contiguous, layouts("float32").strided)
  end)

  on_gpu("in-place ops on device views", function()
    local x = layouts("float32").contiguous
    local c, g = x:clone(), x:to(DEV)
    c:narrow(2, 2, 3):mul_(2)
    g:narrow(2, 2, 3):mul_(2)
    same(c, g, "mul_ into a view")
  end)

  on_gpu("reductions over all dims, some dims and none", function()
    for _, dt in ipairs { "float32", "float64", "int64" } do
      for lname, x in pairs(layouts(dt)) do
        local what = lname .. " " .. dt
        both(function(t) return t:sum() end, "sum " .. what, x)
        if x:numel() > 0 then
          both(function(t) return t:amax() end, "amax " .. what, x)
          both(function(t) return t:amin() end, "amin " .. what, x)
        end
        if x:dim() == 2 and x:numel() > 0 then
          for d = 1, 2 do
            both(function(t) return t:sum(d) end, "sum dim " .. d .. " " .. what, x)
            both(function(t) return t:prod(d, true) end, "prod dim " .. d .. " " .. what, x)
            both(function(t) return t:argmax(d) end, "argmax dim " .. d .. " " .. what, x)
            if not EXACT[dt] then
              both(function(t) return t:mean(d) end, "mean dim " .. d .. " " .. what, x)
              both(function(t) return t:var(d) end, "var dim " .. d .. " " .. what, x)
              both(function(t) return t:logsumexp(d) end, "logsumexp dim " .. d .. " " .. what, x)
              both(function(t) return t:softmax(d) end, "softmax dim " .. d .. " " .. what, x)
              both(function(t) return t:log_softmax(d) end, "log_softmax dim " .. d .. " " .. what, x)
            end
            both(function(t) return t:cumsum(d) end, "cumsum dim " .. d .. " " .. what, x)
          end
        end
      end
    end
    both(function(t) return t:gt(0):cumsum(1, "bool") end, "cumsum in bool", layouts("float32").transposed)
    both(function(t) return t:cumsum(1, "bool") end, "cumsum in bool past 256", tide.ones(300, 2, "bool"))
    local big = tide.randn(1000, 300)
    both(function(t) return t:sum() end, "sum of 300000", big)
    both(function(t) return t:sum(1) end, "sum over a long leading dim", big)
  end)

  on_gpu("matmul in float32, float64, float16, bfloat16 and int64", function()
    tide.manual_seed(3)
    local a, b = tide.randn(33, 17), tide.randn(17, 9)
    for _, dt in ipairs { "float32", "float64", "float16", "bfloat16", "int64" } do
      local A, B = a:mul(4):round():to(dt), b:mul(4):round():to(dt)
      both(tide.matmul, "mm " .. dt, A, B)
      both(tide.matmul, "mm transposed " .. dt, B:t(), A:t())
      both(tide.matmul, "matmul broadcast batch " .. dt, A:reshape(1, 33, 17):expand(3, 33, 17), B)
      both(tide.matmul, "matrix-vector " .. dt, A, B:select(2, 1))
    end
    both(tide.dot, "dot", tide.randn(100), tide.randn(100))
    both(tide.outer, "outer", tide.randn(7), tide.randn(5))
    both(tide.matmul, "k = 0", tide.zeros(3, 0), tide.zeros(0, 4))
  end)

  on_gpu("matmul with TF32 allowed stays within TF32's precision", function()
    tide.manual_seed(5)
    local a, b = tide.randn(256, 256), tide.randn(256, 256)
    local c = tide.matmul(a, b)
    tide.cuda.set_allow_tf32(true)
    local g = tide.matmul(a:to(DEV), b:to(DEV)):to("cpu")
    tide.cuda.set_allow_tf32(false)
    assert.is_true((g - c):abs():amax():item() < 0.05 * 16)
  end)

  -- The decompositions (cuSOLVER there, LAPACK here): every output within a
  -- tolerance (another library, another order of operations), so a sign
  -- that differs (eigenvectors, singular vectors) fails; inputs in several
  -- layouts, which f makes on each device from the same dense tensors.
  local LTOL = { float32 = 2e-3, float64 = 1e-9, float16 = 4e-3 }
  local function all_outputs(f, what, ...)
    local host, dev = { ... }, {}
    for i, x in ipairs(host) do dev[i] = x:to(DEV) end
    local c, g = { f(unpack(host)) }, { f(unpack(dev)) }
    assert.are.equal(#c, #g, what)
    for i = 1, #c do same(c[i], g[i], ("%s, output %d"):format(what, i), LTOL) end
  end
  local function sizes(batch, ...)
    local s = {}
    for _, v in ipairs(batch) do s[#s + 1] = v end
    for _, v in ipairs { ... } do s[#s + 1] = v end
    return s
  end
  -- well-conditioned general matrices, symmetric ones, positive-definite ones
  local function general(dt, batch, n) return (tide.randn(unpack(sizes(batch, n, n))) + tide.eye(n) * n):to(dt) end
  local function symmetric(dt, batch, n)
    local x = tide.randn(unpack(sizes(batch, n, n)))
    return (x + x:mT()):to(dt)
  end
  local function spd(dt, batch, n)
    local x = tide.randn(unpack(sizes(batch, n, n)))
    return (tide.matmul(x, x:mT()) + tide.eye(n) * n):to(dt)
  end
  -- the same matrices read through another layout on both devices
  local views = {
    contiguous = function(a) return a end,
    transposed = function(a) return a:mT():contiguous():mT() end,   -- column-major
    strided = function(a) return tide.cat({ a, a }, -1):narrow(-1, 1, a:size(-1)) end,
  }

  on_gpu("linalg solve, solve_triangular, det and slogdet in every layout, broadcast and empty", function()
    tide.manual_seed(21)
    for _, dt in ipairs { "float32", "float64" } do
      for vname, v in pairs(views) do
        local what = vname .. " " .. dt
        local A, Bm = general(dt, { 3 }, 5), tide.randn(3, 5, 2):to(dt)
        all_outputs(function(a, b) return tide.linalg.solve(v(a), b) end, "solve " .. what, A, Bm)
        all_outputs(function(a, b) return tide.linalg.solve(v(a), v(b)) end, "solve B in layout " .. what, A, Bm)
        all_outputs(function(a) return tide.linalg.inv(v(a)) end, "inv " .. what, A)
        all_outputs(function(a) return tide.linalg.slogdet(v(a)) end, "slogdet " .. what, A)
        all_outputs(function(a) return tide.linalg.det(v(a)) end, "det " .. what, A)
        for _, upper in ipairs { true, false } do
          for _, unit in ipairs { false, true } do
            all_outputs(function(a, b)
              return tide.linalg.solve_triangular(v(a), b, { upper = upper, unitriangular = unit })
            end, ("solve_triangular upper=%s unit=%s %s"):format(upper, unit, what), A, Bm)
          end
        end
      end
      -- A broadcast against B's batch, and B's against A's; a vector B
      local A, Bm = general(dt, {}, 4), tide.randn(2, 3, 4, 3):to(dt)
      all_outputs(tide.linalg.solve, "solve A broadcast " .. dt, A, Bm)
      all_outputs(function(a, b) return tide.linalg.solve_triangular(a, b, { upper = true }) end,
        "solve_triangular A broadcast " .. dt, A, Bm)
      local Ab = general(dt, { 2, 1 }, 4)
      all_outputs(tide.linalg.solve, "solve batch dims broadcast both ways " .. dt, Ab, Bm:narrow(2, 1, 1))
      all_outputs(tide.linalg.solve, "solve a vector " .. dt, general(dt, {}, 6), tide.randn(6):to(dt))
      -- determinants: a negative one, an exactly singular one (0 and -inf), n = 0 (1 and 0)
      local D = tide.tensor({ { { 0, 1 }, { 1, 0 } }, { { 1, 2 }, { 2, 4 } }, { { 3, 1 }, { 1, 2 } } }):to(dt)
      all_outputs(tide.linalg.slogdet, "slogdet signs and a singular matrix " .. dt, D)
      all_outputs(tide.linalg.slogdet, "slogdet of 0x0 matrices " .. dt, tide.zeros(2, 0, 0):to(dt))
      all_outputs(tide.linalg.det, "det signs and a singular matrix " .. dt, D)
      all_outputs(tide.linalg.det, "det of 0x0 matrices " .. dt, tide.zeros(2, 0, 0):to(dt))
      all_outputs(tide.linalg.solve, "solve of an empty batch " .. dt, tide.zeros(0, 3, 3):to(dt),
        tide.zeros(0, 3, 2):to(dt))
      all_outputs(tide.linalg.solve, "solve with 0x0 matrices " .. dt, tide.zeros(2, 0, 0):to(dt),
        tide.zeros(2, 0, 3):to(dt))
      all_outputs(tide.linalg.solve, "solve with B of no columns " .. dt, general(dt, { 2 }, 3),
        tide.zeros(2, 3, 0):to(dt))
    end
    all_outputs(tide.linalg.solve, "solve float16", general("float16", {}, 4), tide.randn(4, 2):to("float16"))
  end)

  on_gpu("linalg cholesky, eigh, qr and svd in every layout, batched and empty, with the CPU's signs", function()
    tide.manual_seed(22)
    for _, dt in ipairs { "float32", "float64" } do
      for vname, v in pairs(views) do
        local what = vname .. " " .. dt
        local P, S = spd(dt, { 2, 2 }, 5), symmetric(dt, { 3 }, 6)
        for _, upper in ipairs { false, true } do
          all_outputs(function(a) return tide.linalg.cholesky(v(a), { upper = upper }) end,
            ("cholesky upper=%s %s"):format(upper, what), P)
          all_outputs(function(a) return tide.linalg.eigh(v(a), upper and "U" or "L") end,
            ("eigh %s %s"):format(upper and "U" or "L", what), S)
        end
        -- matrices that are not symmetric: only the triangle named is read
        local G = general(dt, {}, 4)
        all_outputs(function(a) return tide.linalg.eigh(v(a), "U") end, "eigh of its upper triangle " .. what, G)
        all_outputs(function(a) return tide.linalg.cholesky(v(a)) end, "cholesky of its lower triangle " .. what,
          spd(dt, {}, 4):tril() + tide.randn(4, 4):to(dt):triu(1))
        for _, shape in ipairs { { 5, 3 }, { 3, 5 }, { 4, 4 }, { 5, 4 }, { 4, 5 } } do
          local A = tide.randn(2, shape[1], shape[2]):to(dt)
          local sw = ("%dx%d %s"):format(shape[1], shape[2], what)
          for _, mode in ipairs { "reduced", "complete", "r" } do
            all_outputs(function(a) return tide.linalg.qr(v(a), mode) end, "qr " .. mode .. " " .. sw, A)
          end
          all_outputs(function(a) return tide.linalg.svd(v(a), { full_matrices = false }) end, "svd reduced " .. sw, A)
          all_outputs(function(a) return tide.linalg.svdvals(v(a)) end, "svdvals " .. sw, A)
          -- full: U's (or Vh's) extra columns are unique up to sign only when there is one
          if math.abs(shape[1] - shape[2]) <= 1 then
            all_outputs(function(a) return tide.linalg.svd(v(a)) end, "svd full " .. sw, A)
          end
        end
      end
      -- the sign rule itself, on the device's results (Vh's rows go with U's columns)
      local _, V = tide.linalg.eigh(symmetric(dt, { 4 }, 5):to(DEV))
      local U = tide.linalg.svd(tide.randn(4, 6, 3):to(dt):to(DEV), { full_matrices = false })
      for _, cols in ipairs { V, U } do
        local at = cols:abs():argmax(-2, true)
        assert.is_true(cols:gather(-2, at):gt(0):all():item(), "the first element of largest magnitude is positive")
      end
      -- empty batches and empty matrices: identities where the full factors have room
      local E, Z = tide.zeros(0, 3, 3):to(dt), tide.zeros(2, 0, 0):to(dt)
      for ename, e in pairs { ["empty batch"] = E, ["0x0"] = Z } do
        all_outputs(tide.linalg.cholesky, "cholesky " .. ename .. " " .. dt, e)
        all_outputs(tide.linalg.eigh, "eigh " .. ename .. " " .. dt, e)
      end
      for _, shape in ipairs { { 2, 3, 0 }, { 2, 0, 3 }, { 0, 3, 2 } } do
        local e, sw = tide.zeros(unpack(shape)):to(dt), table.concat(shape, "x") .. " " .. dt
        for _, mode in ipairs { "reduced", "complete", "r" } do
          all_outputs(function(a) return tide.linalg.qr(a, mode) end, "qr " .. mode .. " " .. sw, e)
        end
        all_outputs(tide.linalg.svd, "svd full " .. sw, e)
        all_outputs(function(a) return tide.linalg.svd(a, { full_matrices = false }) end, "svd reduced " .. sw, e)
        all_outputs(tide.linalg.svdvals, "svdvals " .. sw, e)
      end
    end
    local H = symmetric("float16", {}, 4)
    all_outputs(tide.linalg.eigh, "eigh float16", H)
  end)

  on_gpu("a factorisation that fails is the CPU's error, naming the batch element", function()
    local on = DEV:match("^cuda") and (" (on " .. DEV .. ")") or ""
    -- the CPU's message, then the device's, raised at the result's next read
    local function fails(f, what, ...)
      local host, dev = { ... }, {}
      for i, x in ipairs(host) do dev[i] = x:to(DEV) end
      local ok, err = pcall(function() return f(unpack(host)):totable() end)
      assert.is_false(ok, what)
      local msg = err:match("(linalg_%w+:.*)$")
      ok, err = pcall(function() return f(unpack(dev)):totable() end)
      tide.sync()   -- raised above: not again
      assert.is_false(ok, what)
      assert.is_truthy(err:find(msg .. on, 1, true), ("%s: %q, not %q"):format(what, err, msg .. on))
      return msg
    end
    for _, dt in ipairs { "float32", "float64" } do
      local bad = tide.tensor({ { 1, 0, 0 }, { 0, -1, 0 }, { 0, 0, 1 } }):to(dt)
      local good = tide.eye(3):to(dt)
      assert.are.equal(
        "linalg_cholesky: the matrix is not positive-definite: its leading minor of order 2 is not",
        fails(tide.linalg.cholesky, "cholesky " .. dt, bad))
      assert.are.equal("linalg_cholesky: the matrix is not positive-definite: its leading minor of order 2 is not "
        .. "(batch element 2 of 4)",
        fails(tide.linalg.cholesky, "cholesky batch " .. dt, tide.stack({ good, bad, good, bad })))
      local singular = tide.tensor({ { 1, 2 }, { 2, 4 } }):to(dt)
      assert.are.equal("linalg_solve: the matrix is singular: pivot 2 of its LU factorisation is zero",
        fails(tide.linalg.inv, "inv " .. dt, singular))
      -- A broadcast: the first element of the result's batch whose A is singular
      local As = tide.stack({ tide.eye(2):to(dt), singular }):reshape(2, 1, 2, 2)
      assert.are.equal("linalg_solve: the matrix is singular: pivot 2 of its LU factorisation is zero "
        .. "(batch element 4 of 6)",
        fails(tide.linalg.solve, "solve broadcast " .. dt, As, tide.ones(3, 2, 1):to(dt)))
      fails(tide.linalg.solve, "solve with B of no columns " .. dt, singular, tide.zeros(2, 0):to(dt))
    end
  end)

  on_gpu("creation and shaping ops", function()
    local dev = { device = DEV }
    same(tide.zeros(3, 4), tide.zeros(3, 4, dev), "zeros")
    same(tide.full({ 2, 3 }, 7, "int32"), tide.full({ 2, 3 }, 7, { dtype = "int32", device = DEV }), "full")
    same(tide.arange(0, 10, 0.5), tide.arange(0, 10, 0.5, dev), "arange")
    same(tide.linspace(-1, 1, 11), tide.linspace(-1, 1, 11, dev), "linspace")
    same(tide.eye(3, 5), tide.eye(3, 5, dev), "eye")
    local x = layouts("float32")
    both(function(a, b) return tide.cat({ a, b }, 1) end, "cat", x.contiguous, x.strided)
    both(function(a, b) return tide.stack({ a, b }, 2) end, "stack", x.contiguous, x.transposed:t())
    both(function(a) return a:flip(1) end, "flip", x.transposed)
    both(function(a) return a:tril() end, "tril", x.contiguous)
    both(function(a) return a:triu(1) end, "triu", x.strided)
  end)

  on_gpu("random ops draw the CPU's numbers for a seed", function()
    -- bit for bit (tolerance 0), but randn in float64: CUDA's and glibc's double
    -- log and sincos are not correctly rounded, and differ
    for _, case in ipairs {
      { "rand", function(o) return tide.rand(1000, o) end, 0 },
      { "randn", function(o) return tide.randn(100001, o) end, 0 },
      { "randn float64", function(o) return tide.randn(37, { dtype = "float64", device = o and o.device }) end },
      { "randint", function(o) return tide.randint(-5, 1000, { 999 }, o) end, 0 },
      { "randperm", function(o) return tide.randperm(500, o) end, 0 },
    } do
      tide.manual_seed(42)
      local c = case[2]()
      tide.manual_seed(42)
      local g = case[2]({ device = DEV })
      same(c, g, case[1], case[3])
    end
    tide.manual_seed(9)
    local p = tide.rand(300)
    tide.manual_seed(10)
    local c = tide.bernoulli(p)
    tide.manual_seed(10)
    same(c, tide.bernoulli(p:to(DEV)), "bernoulli")
    -- a probability outside [0, 1] is found on the device and raised at the next read
    local q = tide.tensor({ { 0.5, 2 }, { -0.25, 0.1 } }):to(DEV):t()
    local ok, err = pcall(function() return tide.bernoulli(q):totable() end)
    tide.sync()   -- the read raised the failure: not again
    assert.is_false(ok)
    assert.matches("bernoulli: probability %-0%.25 is outside %[0, 1%]", err)
  end)

  on_gpu("bad parameters are refused at the call, as on the CPU", function()
    local x = tide.zeros(2, 3):to(DEV)
    assert.has_error(function() return x:flip(3) end, "flip: dimension 3 is out of range for a 2-d tensor")
    assert.has_error(function() return x:flip(1, -2) end, "flip: dimension 1 is repeated")
    assert.has_error(function() return x[1]:tril() end, "tril: the input must have at least 2 dimensions, got shape [3]")
    assert.has_error(function() return tide.randint(5, 2, { 3 }, { device = DEV }) end,
      "randint: low must be less than high, got low = 5 and high = 2")
    assert.has_error(function() return tide.randperm(300, { dtype = "uint8", device = DEV }) end,
      "randperm: n = 300 is too large for dtype uint8 (at most 255)")
  end)
end)
