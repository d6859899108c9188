--- linalg: matmul, mm, bmm, dot and outer against a float64 reference computed
-- in plain Lua (NumPy's matmul rules), over dtypes, layouts (transposed,
-- strided, expanded), broadcast batch dims, 1-d, empty and threaded sizes,
-- each error message, and the BLAS the runtime reports.
local tide = require "tide"
local H = require "spec.helpers"
local ffi = require "ffi"

-- -- the reference -------------------------------------------------------------------

local function numel(shape)
  local n = 1
  for i = 1, #shape do n = n * shape[i] end
  return n
end

--- NumPy matmul of flat row-major values; returns flat values and the result shape.
local function ref_matmul(av, ashape, bv, bshape)
  local as, bs = { unpack(ashape) }, { unpack(bshape) }
  local drop_m, drop_n = #as == 1, #bs == 1
  if drop_m then as = { 1, as[1] } end
  if drop_n then bs = { bs[1], 1 } end
  local m, k, n = as[#as - 1], as[#as], bs[#bs]
  assert(bs[#bs - 1] == k)
  local ab, bb = {}, {}
  for i = 1, #as - 2 do ab[i] = as[i] end
  for i = 1, #bs - 2 do bb[i] = bs[i] end
  local nb = math.max(#ab, #bb)
  local ob = {}
  for d = 1, nb do
    local sa, sb = ab[d - (nb - #ab)] or 1, bb[d - (nb - #bb)] or 1
    ob[d] = sa == 1 and sb or sa
  end
  -- offset of batch index idx (1-based per dim) into a batch shape that broadcasts to ob
  local function boff(shape, idx, mat)
    local off, step = 0, mat
    for d = #shape, 1, -1 do
      local i = shape[d] == 1 and 0 or idx[d + (nb - #shape)] - 1
      off = off + i * step
      step = step * shape[d]
    end
    return off
  end
  local out, idx = {}, {}
  for d = 1, nb do idx[d] = 1 end
  for _ = 1, numel(ob) do
    local oa, obb = boff(ab, idx, m * k), boff(bb, idx, k * n)
    for i = 0, m - 1 do
      for j = 0, n - 1 do
        local s = 0
        for p = 0, k - 1 do s = s + av[oa + i * k + p + 1] * bv[obb + p * n + j + 1] end
        out[#out + 1] = s
      end
    end
    for d = nb, 1, -1 do
      idx[d] = idx[d] + 1
      if idx[d] <= ob[d] then break end
      idx[d] = 1
    end
  end
  local shape = { unpack(ob) }
  if not drop_m then shape[#shape + 1] = m end
  if not drop_n then shape[#shape + 1] = n end
  return out, shape
end

local function ref_outer(av, bv)
  local r = {}
  for i = 1, #av do for j = 1, #bv do r[#r + 1] = av[i] * bv[j] end end
  return r, { #av, #bv }
end

local seed = 1
--- A tensor of random values in dtype (integers in [-5, 5) for integer dtypes).
local function rnd(shape, dtype)
  seed = seed + 7
  local vals = H.values(math.max(numel(shape), 1), -1, 1, seed)
  if dtype and not dtype:find("float") then
    for i = 1, #vals do vals[i] = math.floor(vals[i] * 5) end
  end
  if numel(shape) == 0 then return tide.zeros(shape, dtype or "float32") end
  return tide.tensor(H.nest(vals, shape), dtype or "float32")
end

local tol = { float32 = { 1e-5, 1e-5 }, float64 = { 1e-12, 1e-13 }, int32 = { 0, 0 }, int64 = { 0, 0 },
              uint8 = { 0, 0 }, float16 = { 2e-3, 2e-3 } }

--- Checks op(a, b) against the reference on the values a and b hold.
local function check(op, a, b, dtype, msg)
  local r = tide[op](a, b)
  local av, bv = H.flat(a:totable()), H.flat(b:totable())
  local vals, shape
  if op == "outer" then vals, shape = ref_outer(av, bv) else vals, shape = ref_matmul(av, a:shape(), bv, b:shape()) end
  dtype = dtype or r:dtype()
  assert.are.equal(dtype, r:dtype())
  local t = tol[dtype]
  -- float32 sums of k products of values below 1: allow for k roundings
  local k = op == "outer" and 1 or a:shape()[a:dim()]
  H.close(r, #shape == 0 and vals[1] or H.nest(vals, shape), t[1], t[2] * math.max(1, k), msg)
  return r
end

-- -- specs -------------------------------------------------------------------------------

describe("linalg", function()
  it("computes hand-checked products", function()
    local a = tide.tensor { { 1, 2, 3 }, { 4, 5, 6 } }
    local b = tide.tensor { { 1, 0 }, { 0, 1 }, { 1, 1 } }
    H.equal(a:matmul(b), { { 4, 5 }, { 10, 11 } })
    H.equal(tide.mm(a, b), { { 4, 5 }, { 10, 11 } })
    H.equal(tide.tensor { 1, 2, 3 }:dot(tide.tensor { 4, 5, 6 }), 32)
    H.equal(tide.tensor { 1, 2 }:outer(tide.tensor { 3, 4, 5 }), { { 3, 4, 5 }, { 6, 8, 10 } })
    H.equal(a:matmul(tide.tensor { 1, 1, 1 }), { 6, 15 })
    H.equal(tide.tensor { 1, 1 }:matmul(a), { 5, 7, 9 })
    H.equal(tide.bmm(a:unsqueeze(1), b:unsqueeze(1)), { { { 4, 5 }, { 10, 11 } } })
  end)

  for _, dtype in ipairs { "float32", "float64", "int32", "int64", "uint8" } do
    it("matches the float64 reference in " .. dtype, function()
      local function r(shape)
        local t = rnd(shape, dtype)
        if dtype == "uint8" then t = (rnd(shape, "int64"):abs()):to("uint8") end
        return t
      end
      check("matmul", r { 5, 7 }, r { 7, 3 }, dtype)
      check("mm", r { 1, 9 }, r { 9, 17 }, dtype)
      check("matmul", r { 33, 20 }, r { 20, 19 }, dtype)
      check("bmm", r { 3, 4, 6 }, r { 3, 6, 5 }, dtype)
      check("dot", r { 13 }, r { 13 }, dtype)
      check("outer", r { 4 }, r { 6 }, dtype)
      check("matmul", r { 6 }, r { 6, 4 }, dtype)
      check("matmul", r { 2, 3, 6 }, r { 6 }, dtype)
      check("matmul", r { 2, 1, 3, 4 }, r { 5, 4, 2 }, dtype)
    end)
  end

  it("wraps integer overflow like two's complement", function()
    local a = tide.tensor({ { 2 ^ 31 - 1, 1 } }, "int32")
    local b = tide.tensor({ { 1 }, { 1 } }, "int32")
    H.equal(a:matmul(b), { { -2 ^ 31 } })
    H.equal(tide.tensor({ 200, 100 }, "uint8"):dot(tide.tensor({ 1, 1 }, "uint8")), 44)
  end)

  it("promotes mixed dtypes", function()
    local a32, a64 = rnd({ 4, 5 }, "float32"), rnd({ 5, 3 }, "float64")
    check("matmul", a32, a64, "float64")
    check("matmul", rnd({ 4, 5 }, "int32"), rnd({ 5, 3 }, "float32"), "float32")
    check("mm", rnd({ 4, 5 }, "int64"), rnd({ 5, 3 }, "int32"), "int64")
    check("dot", rnd({ 7 }, "uint8"), rnd({ 7 }, "float64"), "float64")
    check("outer", rnd({ 3 }, "int32"), rnd({ 2 }, "float64"), "float64")
    -- float16 storage computes in float32 and rounds the result to float16
    local h1, h2 = rnd({ 3, 4 }, "float16"), rnd({ 4, 2 }, "float16")
    local r = tide.matmul(h1, h2)
    assert.are.equal("float16", r:dtype())
    H.close(r, tide.matmul(h1:to("float32"), h2:to("float32")), 2e-3, 2e-3)
  end)

  it("reads transposed, strided and expanded inputs", function()
    for _, dtype in ipairs { "float32", "float64", "int64" } do
      local a, b = rnd({ 6, 9 }, dtype), rnd({ 9, 5 }, dtype)
      for na, la in pairs(H.layouts(a)) do
        for nb, lb in pairs(H.layouts(b)) do
          check("matmul", la, lb, dtype, dtype .. " " .. na .. " x " .. nb)
        end
      end
      -- true transposes (column-major storage): BLAS reads them with transpose flags
      check("mm", rnd({ 9, 6 }, dtype):t(), rnd({ 5, 9 }, dtype):t(), dtype)
      -- a row or column broadcast along a matrix dim (stride 0): copied
      check("mm", rnd({ 6, 1 }, dtype):expand(6, 9), rnd({ 1, 5 }, dtype):expand(9, 5), dtype)
      -- expanded batch (stride 0) and batch-strided views
      local x = rnd({ 1, 4, 3 }, dtype):expand(5, 4, 3)
      local y = rnd({ 5, 3, 2 }, dtype)
      check("bmm", x, y, dtype)
      check("matmul", rnd({ 4, 3 }, dtype), y, dtype)
      check("bmm", rnd({ 3, 2, 4 }, dtype):transpose(1, 2), rnd({ 4, 2, 3 }, dtype):permute(2, 1, 3), dtype)
      -- 1-d strided operands
      check("dot", rnd({ 10 }, dtype):as_strided({ 5 }, { 2 }, 0), rnd({ 5 }, dtype), dtype)
      check("outer", rnd({ 8 }, dtype):as_strided({ 4 }, { 2 }, 1), rnd({ 9 }, dtype):as_strided({ 3 }, { 3 }, 0), dtype)
    end
  end)

  it("broadcasts batch dims", function()
    local r = check("matmul", rnd { 2, 1, 3, 4 }, rnd { 5, 4, 2 })
    assert.are.same({ 2, 5, 3, 2 }, r:shape())
    assert.are.same({ 7, 2, 3 }, check("matmul", rnd { 7, 2, 5 }, rnd { 1, 5, 3 }):shape())
    assert.are.same({ 3, 2 }, check("matmul", rnd { 3, 2, 4 }, rnd { 4 }):shape())
    assert.are.same({ 3, 5 }, check("matmul", rnd { 4 }, rnd { 3, 4, 5 }):shape())
  end)

  it("handles k = 0 and empty results", function()
    H.equal(tide.matmul(tide.zeros(3, 0), tide.zeros(0, 2)), { { 0, 0 }, { 0, 0 }, { 0, 0 } })
    H.equal(tide.dot(tide.zeros(0), tide.zeros(0)), 0)
    H.equal(tide.mm(tide.zeros({ 2, 0 }, "int32"), tide.zeros({ 0, 2 }, "int32")), { { 0, 0 }, { 0, 0 } })
    assert.are.same({ 0, 4 }, tide.mm(tide.zeros(0, 3), tide.ones(3, 4)):shape())
    assert.are.same({ 3, 0 }, tide.mm(tide.ones(3, 3), tide.zeros(3, 0)):shape())
    assert.are.same({ 0, 2, 2 }, tide.bmm(tide.zeros(0, 2, 3), tide.zeros(0, 3, 2)):shape())
    assert.are.same({ 0, 5 }, tide.outer(tide.zeros(0), tide.ones(5)):shape())
    H.equal(tide.matmul(tide.zeros(2, 0, "float16"), tide.zeros(0, 1, "float16")), { { 0 }, { 0 } })
  end)

  it("splits large products across threads", function()
    check("matmul", rnd { 300, 200 }, rnd { 200, 250 })
    check("matmul", rnd({ 300, 200 }, "float64"):t():contiguous():t(), rnd({ 200, 250 }, "float64"))
    check("matmul", rnd { 250, 200 }, rnd({ 300, 200 }):t())   -- split by rows (m > n)
    check("bmm", rnd { 3, 70, 90 }, rnd { 3, 90, 80 })
    check("matmul", rnd({ 300, 200 }, "int32"), rnd({ 200, 250 }, "int32"))
    check("dot", rnd { 5000 }, rnd { 5000 })
  end)

  it("runs a lone product on OpenBLAS's threads while other devices' products run serially", function()
    -- "cpu" lends the pool's cores to OpenBLAS; cpu:0 and cpu:1 call it
    -- single-threaded at the same time: each must see its own thread count
    local as, bs, rs = {}, {}, {}
    for i, dev in ipairs { "cpu", "cpu:0", "cpu:1", "cpu" } do
      as[i], bs[i] = rnd { 160, 120 + i }, rnd { 120 + i, 140 }
      rs[i] = tide.matmul(as[i]:to(dev), bs[i]:to(dev))
    end
    for i = 1, #rs do   -- against the float64 product, within float32 rounding of 120 terms
      local ref = tide.matmul(as[i]:to("float64"), bs[i]:to("float64"))
      H.close(rs[i]:to("cpu"), ref:totable(), 1e-5, 1e-4, "product " .. i)
    end
  end)

  it("writes into a given tensor of another dtype or layout", function()
    local B = require "bindings.ffi"
    local C = B.C
    local a, b = rnd({ 4, 6 }, "int32"), rnd({ 6, 3 }, "int32")
    local expect = tide.matmul(a, b)
    for _, dst in ipairs { tide.zeros(4, 3, "float64"), tide.zeros(3, 4, "int64"):t(), tide.zeros(4, 3, "int32") } do
      local ins = ffi.new("tide_tensor *[2]", { a, b })
      local outs = ffi.new("tide_tensor *[1]")
      assert.are.equal(0, C.tide_op_call(C.tide_op_find("matmul"), ins, 2, nil, outs, dst))
      C.tide_tensor_release(outs[0])
      H.equal(dst, expect)
    end
    -- the destination is one of the inputs: computed into a temporary first
    local x = tide.tensor { { 1, 2 }, { 3, 4 } }
    local ins = ffi.new("tide_tensor *[2]", { x, x })
    local outs = ffi.new("tide_tensor *[1]")
    assert.are.equal(0, C.tide_op_call(C.tide_op_find("mm"), ins, 2, nil, outs, x))
    C.tide_tensor_release(outs[0])
    H.equal(x, { { 7, 10 }, { 15, 22 } })
  end)

  it("rejects bad shapes and dtypes with clear messages", function()
    local z = tide.tensor(1)
    assert.has_error(function() tide.matmul(tide.ones(2, 3), tide.ones(4, 5)) end,
      "matmul: shapes [2,3] and [4,5] cannot be multiplied: 3 ~= 4")
    assert.has_error(function() tide.matmul(z, tide.ones(3)) end,
      "matmul: expects at least 1-d tensors, got shapes [] and [3]")
    assert.has_error(function() tide.matmul(tide.ones(3), tide.ones(4)) end,
      "matmul: shapes [3] and [4] cannot be multiplied: 3 ~= 4")
    assert.has_error(function() tide.matmul(tide.ones(2, 3, 4), tide.ones(3, 4, 5)) end,
      "matmul: batch dimensions of shapes [2,3,4] and [3,4,5] cannot be broadcast: 2 ~= 3")
    assert.has_error(function() tide.mm(tide.ones(2, 3, 4), tide.ones(4, 5)) end,
      "mm: expects 2-d tensors, got shapes [2,3,4] and [4,5]")
    assert.has_error(function() tide.mm(tide.ones(2, 3), tide.ones(4, 5)) end,
      "mm: shapes [2,3] and [4,5] cannot be multiplied: 3 ~= 4")
    assert.has_error(function() tide.bmm(tide.ones(2, 3), tide.ones(2, 3, 4)) end,
      "bmm: expects 3-d tensors, got shapes [2,3] and [2,3,4]")
    assert.has_error(function() tide.bmm(tide.ones(2, 3, 4), tide.ones(3, 4, 5)) end,
      "bmm: shapes [2,3,4] and [3,4,5] have different batch sizes: 2 ~= 3")
    assert.has_error(function() tide.bmm(tide.ones(2, 3, 4), tide.ones(2, 5, 6)) end,
      "bmm: shapes [2,3,4] and [2,5,6] cannot be multiplied: 4 ~= 5")
    assert.has_error(function() tide.dot(tide.ones(2, 3), tide.ones(3)) end,
      "dot: expects 1-d tensors, got shapes [2,3] and [3]")
    assert.has_error(function() tide.dot(tide.ones(3), tide.ones(4)) end,
      "dot: shapes [3] and [4] cannot be multiplied: 3 ~= 4")
    assert.has_error(function() tide.outer(z, tide.ones(3)) end,
      "outer: expects 1-d tensors, got shapes [] and [3]")
    assert.has_error(function() tide.matmul(tide.ones({ 2, 2 }, "bool"), tide.ones({ 2, 2 }, "bool")) end,
      "matmul: dtype bool is not supported")
    assert.has_error(function() tide.matmul(tide.ones(2, 2), 3) end,
      "matmul: both arguments must be tensors, got tensor and number")
  end)

  it("reports the BLAS in use and its check", function()
    local cfg = tide.config()
    assert.is_string(cfg.blas)
    assert.is_truthy(cfg.blas == "openblas" or cfg.blas == "builtin")
    assert.is_string(cfg.blas_core)
    assert.are.equal("ok", cfg.blas_check)
    if cfg.blas == "openblas" then
      assert.is_truthy(({ user = 1, cpuid = 1, openblas = 1, fallback = 1 })[cfg.blas_coretype_source])
    end
  end)

  it("gives the same results with the built-in GEMM (TIDE_BLAS=builtin)", function()
    if not os.getenv("TIDE_LIBRARY") then
      print("skipped: TIDE_LIBRARY is not set, so no child process can load libtide")
      return
    end
    local script = [[
      local tide = require "tide"
      assert(tide.config().blas == "builtin" and tide.config().blas_check == "ok")
      local function v(n, s) local r, x = {}, s for i = 1, n do x = (x * 1103515245 + 12345) % 2147483648; r[i] = x / 2147483648 - 0.5 end return r end
      for _, d in ipairs { "float32", "float64" } do
        for _, sz in ipairs { { 1, 1, 1 }, { 7, 5, 3 }, { 67, 300, 45 }, { 130, 17, 530 } } do
          local m, k, n = sz[1], sz[2], sz[3]
          local a = tide.tensor(v(m * k, 1), d):view(m, k)
          local b = tide.tensor(v(k * n, 2), d):view(n, k):t()
          local c = a:matmul(b):totable()
          local av, bv = a:totable(), b:totable()
          for i = 1, m do for j = 1, n do
            local s = 0
            for p = 1, k do s = s + av[i][p] * bv[p][j] end
            assert(math.abs(c[i][j] - s) <= 1e-4 * k, d .. " " .. m .. "x" .. k .. "x" .. n)
          end end
        end
      end
      io.write("ok")
    ]]
    local f = assert(io.popen("TIDE_BLAS=builtin luajit -e '" .. script:gsub("'", "'\\''") .. "' 2>&1"))
    local out = f:read("*a")
    f:close()
    assert.are.equal("ok", out)
  end)
end)
