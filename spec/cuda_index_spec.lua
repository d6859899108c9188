-- The indexing ops on a CUDA device against the same ops on the CPU
-- (runtime/src/cuda/index.cu against ops/cpu/index.c): index_select, gather,
-- scatter, scatter_add, index_add and masked_select, with the input, the
-- index and src contiguous, transposed, strided and offset on the device,
-- indices of int32 and int64, negative dims, 0-d and empty tensors, repeated
-- indices (scatter's last write wins on either device), the in-place forms,
-- and bad indices raising the CPU's error. Tagged #cuda: where no CUDA device
-- is usable, each case prints why it was skipped and checks nothing else
-- (spec/helpers/cuda_compare.lua).
local tide = require "tide"

local C = require "spec.helpers.cuda_compare"
local on_gpu, same, DEV = C.on_gpu, C.same, C.DEV

-- one dtype of each element size, and the dtypes the adds accept
local MOVE_DTYPES = { "float32", "float64", "int32", "int64", "float16", "uint8", "bool" }
local ADD_DTYPES = { "float32", "float64", "int32", "int64", "uint8", "float16", "bfloat16" }
local FLOAT = { float32 = true, float64 = true, float16 = true, bfloat16 = true }

-- Values of a dtype, the same for a seed: small integers for the integer
-- dtypes (uint8 over its whole range, to wrap in the adds), floats otherwise.
local function values(shape, dtype, seed)
  tide.manual_seed(seed)
  if dtype == "bool" then return tide.randint(0, 2, shape):to("bool") end
  if dtype == "uint8" then return tide.randint(0, 256, shape):to("uint8") end
  if FLOAT[dtype] then return tide.randn(shape):mul(3):to(dtype) end
  return tide.randint(-50, 50, shape):to(dtype)
end

-- 1-based indices into a dimension of `size`, repeats likely.
local function indices(shape, size, seed, dtype)
  tide.manual_seed(seed)
  return tide.randint(1, size + 1, shape):to(dtype or "int64")
end

local function wrap_dim(dim, nd) return dim > 0 and dim or nd + 1 + dim end

-- t (a host tensor) as a tensor of its own on device dev, laid out as `name`.
-- Built on the device: to() makes a dense copy, whatever t's strides.
local LAYOUTS = { "contiguous", "transposed", "strided", "offset" }
local function lay(t, name, dev)
  local c = t:clone():to(dev)
  if name == "transposed" and t:dim() >= 2 then
    return c:transpose(1, 2):clone():transpose(1, 2)
  elseif name == "strided" and t:dim() >= 1 then   -- every other element of the last dim
    local shape = t:shape()
    shape[#shape] = shape[#shape] * 2
    local wide = tide.zeros(shape, { dtype = t:dtype(), device = dev })
    local st = wide:stride()
    st[#st] = 2
    local v = wide:as_strided(t:shape(), st, 0)
    v:copy_(c)
    return v
  elseif name == "offset" and t:dim() >= 1 then    -- after a first row: a storage offset
    local shape = t:shape()
    shape[1] = shape[1] + 1
    local v = tide.zeros(shape, { dtype = t:dtype(), device = dev }):narrow(1, 2, t:size(1))
    v:copy_(c)
    return v
  end
  return c
end

-- t in layout `name` on the host and on the device.
local function pair(t, name)
  return lay(t, name, "cpu"), lay(t, name, DEV)
end

-- f(args) on the host and on the device (args given on the host), compared.
local function both(what, f, ...)
  local host, dev = { ... }, {}
  for i, t in ipairs(host) do dev[i] = tide.is_tensor(t) and t:clone():to(DEV) or t end
  same(f(unpack(host)), f(unpack(dev)), what)
end

-- f(args) fails on the host and on the device with a message containing msg.
local function raises(msg, f, ...)
  local host, dev = { ... }, {}
  for i, t in ipairs(host) do dev[i] = tide.is_tensor(t) and t:clone():to(DEV) or t end
  for _, args in ipairs { host, dev } do
    local ok, err = pcall(function() return C.flat(f(unpack(args))) end)   -- reading waits for the op
    tide.sync()   -- the read raised the failure: not again
    assert.is_false(ok, msg)
    assert.matches(msg, tostring(err), 1, true)
  end
end

describe("CUDA indexing kernels against the CPU's", function()
  on_gpu("index_select in every layout, dtype, index dtype and dim", function()
    local shape = { 3, 4, 5 }
    for _, dt in ipairs(MOVE_DTYPES) do
      local x = values(shape, dt, 1)
      for _, dim in ipairs { 1, 2, 3, -1, -3 } do
        for _, idt in ipairs { "int32", "int64" } do
          local idx = indices({ 7 }, shape[wrap_dim(dim, 3)], 10 + dim, idt)
          for _, xl in ipairs(LAYOUTS) do
            for _, il in ipairs { "contiguous", "strided", "offset" } do
              local hx, gx = pair(x, xl)
              local hi, gi = pair(idx, il)
              same(hx:index_select(dim, hi), gx:index_select(dim, gi),
                ("index_select %s %s, %s %s index, dim %d"):format(xl, dt, il, idt, dim))
            end
          end
        end
      end
    end
    local big = tide.arange(300 * 400):view(300, 400):to("float32")
    local idx = indices({ 500 }, 300, 3)
    local hx, gx = pair(big, "transposed")
    local hi, gi = pair(idx, "contiguous")
    same(hx:index_select(1, hi), gx:index_select(1, gi), "index_select of 500 rows")
    same(hx:t():index_select(2, hi), gx:t():index_select(2, gi), "index_select of 500 columns")
  end)

  on_gpu("gather in every layout, dtype, index dtype and dim", function()
    local shape = { 3, 4, 5 }
    for _, dt in ipairs(MOVE_DTYPES) do
      local x = values(shape, dt, 2)
      for _, dim in ipairs { 1, 2, 3, -2 } do
        local D, is = wrap_dim(dim, 3), {}
        for d = 1, 3 do is[d] = d == D and 6 or shape[d] - 1 end   -- longer than x along dim
        for _, idt in ipairs { "int32", "int64" } do
          local idx = indices(is, shape[D], 20 + dim, idt)
          for _, xl in ipairs(LAYOUTS) do
            for _, il in ipairs { "contiguous", "transposed", "strided" } do
              local hx, gx = pair(x, xl)
              local hi, gi = pair(idx, il)
              same(hx:gather(dim, hi), gx:gather(dim, gi),
                ("gather %s %s, %s %s index, dim %d"):format(xl, dt, il, idt, dim))
            end
          end
        end
      end
    end
    local x = values({ 200, 300 }, "float64", 3)
    both("gather of 50000", function(a, i) return a:gather(2, i) end, x, indices({ 200, 250 }, 300, 4))
  end)

  on_gpu("scatter with repeated indices writes the last value, as the CPU", function()
    local shape = { 3, 4, 5 }
    for _, dt in ipairs(MOVE_DTYPES) do
      local x = values(shape, dt, 3)
      for k, dim in ipairs { 1, 2, 3, -1 } do
        local D, is, ss = wrap_dim(dim, 3), {}, {}
        for d = 1, 3 do
          is[d] = d == D and 6 or shape[d] - 1   -- 6 places along dim for at most 5: repeats
          ss[d] = is[d] + 1                      -- src larger than the index
        end
        local idt = k % 2 == 0 and "int32" or "int64"
        local idx, src = indices(is, shape[D], 30 + dim, idt), values(ss, dt, 40 + k)
        for _, xl in ipairs(LAYOUTS) do
          for _, il in ipairs { "contiguous", "transposed" } do
            for _, sl in ipairs { "contiguous", "strided" } do
              local hx, gx = pair(x, xl)
              local hi, gi = pair(idx, il)
              local hs, gs = pair(src, sl)
              same(hx:scatter(dim, hi, hs), gx:scatter(dim, gi, gs),
                ("scatter %s %s, %s %s index, %s src, dim %d"):format(xl, dt, il, idt, sl, dim))
              same(hx, gx, "scatter leaves its input alone")
            end
          end
        end
      end
    end
    -- one index per row (a one-hot): no repeats possible, a host number as src
    both("one-hot scatter", function(z, i) return z:scatter(2, i, 1) end, tide.zeros(8, 10), indices({ 8, 1 }, 10, 5))
    -- src of a lower dtype category is converted
    both("int32 src into float32", function(a, i, s) return a:scatter(1, i, s) end, values({ 4, 3 }, "float32", 6),
      indices({ 6, 3 }, 4, 7), values({ 6, 3 }, "int32", 8))
    both("bool src into int64", function(a, i, s) return a:scatter(2, i, s) end, values({ 4, 3 }, "int64", 6),
      indices({ 4, 5 }, 3, 7), values({ 4, 5 }, "bool", 8))
    -- many repeats over many blocks
    local x = values({ 300, 200 }, "float64", 9)
    for _, dim in ipairs { 1, 2 } do
      both("scatter of 45000 along dim " .. dim, function(a, i, s) return a:scatter(dim, i, s) end, x,
        indices({ 300, 150 }, dim == 1 and 300 or 200, 10 + dim), values({ 300, 150 }, "float64", 12))
    end
    both("100000 into 1000", function(a, i, s) return a:scatter(1, i, s) end, tide.zeros(1000),
      indices({ 100000 }, 1000, 13), values({ 100000 }, "float32", 14))
  end)

  on_gpu("scatter_add sums repeated indices in every dtype it accepts", function()
    local shape = { 3, 4, 5 }
    for _, dt in ipairs(ADD_DTYPES) do
      local x = values(shape, dt, 4)
      for k, dim in ipairs { 1, 2, 3, -2 } do
        local D, is, ss = wrap_dim(dim, 3), {}, {}
        for d = 1, 3 do
          is[d] = d == D and 6 or shape[d] - 1
          ss[d] = is[d] + 1
        end
        local idt = k % 2 == 0 and "int32" or "int64"
        local idx, src = indices(is, shape[D], 50 + dim, idt), values(ss, dt, 60 + k)
        for _, xl in ipairs(LAYOUTS) do
          for _, il in ipairs { "contiguous", "transposed" } do
            for _, sl in ipairs { "contiguous", "strided" } do
              local hx, gx = pair(x, xl)
              local hi, gi = pair(idx, il)
              local hs, gs = pair(src, sl)
              same(hx:scatter_add(dim, hi, hs), gx:scatter_add(dim, gi, gs),
                ("scatter_add %s %s, %s %s index, %s src, dim %d"):format(xl, dt, il, idt, sl, dim))
            end
          end
        end
      end
    end
    both("bool src into int64", function(a, i, s) return a:scatter_add(2, i, s) end, values({ 4, 3 }, "int64", 6),
      indices({ 4, 5 }, 3, 7), values({ 4, 5 }, "bool", 8))
    -- thousands of adds into each place: integers, so float32 sums are exact in any order
    local i = indices({ 100000 }, 100, 15)
    for _, dt in ipairs { "int64", "int32", "float32", "uint8", "float64" } do
      both("100000 adds into 100 " .. dt, function(a, ix, s) return a:scatter_add(1, ix, s) end,
        tide.zeros(100, dt), i, tide.randint(0, 5, { 100000 }):to(dt))
    end
  end)

  on_gpu("index_add in every layout and dtype it accepts", function()
    local shape = { 3, 4, 5 }
    for _, dt in ipairs(ADD_DTYPES) do
      local x = values(shape, dt, 5)
      for k, dim in ipairs { 1, 2, 3, -1, -3 } do
        local D = wrap_dim(dim, 3)
        local ss = { shape[1], shape[2], shape[3] }
        ss[D] = 7
        local idt = k % 2 == 0 and "int32" or "int64"
        local idx, src = indices({ 7 }, shape[D], 70 + dim, idt), values(ss, dt, 80 + k)
        for _, xl in ipairs(LAYOUTS) do
          for _, il in ipairs { "contiguous", "strided" } do
            for _, sl in ipairs { "contiguous", "transposed", "offset" } do
              local hx, gx = pair(x, xl)
              local hi, gi = pair(idx, il)
              local hs, gs = pair(src, sl)
              same(hx:index_add(dim, hi, hs), gx:index_add(dim, gi, gs),
                ("index_add %s %s, %s %s index, %s src, dim %d"):format(xl, dt, il, idt, sl, dim))
            end
          end
        end
      end
    end
    both("index_add of 350 columns", function(a, ix, s) return a:index_add(2, ix, s) end,
      values({ 400, 300 }, "int64", 21), indices({ 350 }, 300, 22), values({ 400, 350 }, "int64", 23))
  end)

  on_gpu("in-place forms write into device views", function()
    local x = values({ 4, 5 }, "float32", 6)
    local idx = indices({ 3, 5 }, 4, 7)
    local src = values({ 3, 5 }, "float32", 8)
    for _, xl in ipairs { "contiguous", "transposed", "strided", "offset" } do
      for _, name in ipairs { "scatter_", "scatter_add_" } do
        local hx, gx = pair(x, xl)
        local gi, gs = idx:to(DEV), src:to(DEV)
        assert.is_true(rawequal(gx, gx[name](gx, 1, gi, gs)), name .. " returns its input")
        hx[name](hx, 1, idx, src)
        same(hx, gx, name .. " into a " .. xl .. " view")
      end
      local hx, gx = pair(x, xl)
      local i1, s1 = indices({ 6 }, 5, 9, "int32"), values({ 4, 6 }, "float32", 10)
      assert.is_true(rawequal(gx, gx:index_add_(2, i1:to(DEV), s1:to(DEV))), "index_add_ returns its input")
      hx:index_add_(2, i1, s1)
      same(hx, gx, "index_add_ into a " .. xl .. " view")
    end
    -- through a float32 temporary (float16, bfloat16) or byte compare-and-swaps (uint8)
    for _, dt in ipairs { "float16", "bfloat16", "uint8", "int32" } do
      local a, i, s = values({ 4, 6 }, dt, 11), indices({ 4, 9 }, 6, 12), values({ 4, 9 }, dt, 13)
      for _, xl in ipairs { "contiguous", "strided" } do
        local hx, gx = pair(a, xl)
        hx:scatter_add_(2, i, s)
        gx:scatter_add_(2, i:to(DEV), s:to(DEV))
        same(hx, gx, "scatter_add_ " .. dt .. " " .. xl)
        hx:scatter_(2, i, s)
        gx:scatter_(2, i:to(DEV), s:to(DEV))
        same(hx, gx, "scatter_ " .. dt .. " " .. xl)
      end
    end
  end)

  on_gpu("masked_select with broadcast masks and inputs", function()
    for _, dt in ipairs(MOVE_DTYPES) do
      local x = values({ 3, 4, 5 }, dt, 7)
      for k, ms in ipairs { { 3, 4, 5 }, { 4, 5 }, { 3, 1, 5 }, { 5 }, {} } do
        local m = values(ms, "bool", 90 + k)
        for _, xl in ipairs(LAYOUTS) do
          for _, ml in ipairs { "contiguous", "transposed", "strided" } do
            local hx, gx = pair(x, xl)
            local hm, gm = pair(m, ml)
            same(hx:masked_select(hm), gx:masked_select(gm),
              ("masked_select %s %s, %s mask of %d dims"):format(xl, dt, ml, #ms))
          end
        end
      end
      local hx, gx = pair(values({ 4, 5 }, dt, 8), "transposed")
      local hm, gm = pair(values({ 3, 4, 5 }, "bool", 9), "strided")
      same(hx:masked_select(hm), gx:masked_select(gm), "masked_select of a broadcast input " .. dt)
    end
    local n = 200000
    both("masked_select of 200000", function(a) return a:masked_select(tide.remainder(a, 7):eq(3)) end,
      tide.arange(n))
  end)

  on_gpu("0-d and empty tensors", function()
    local x = values({ 4, 5 }, "float32", 10)
    local none = tide.tensor({}, "int64")
    both("index_select of no rows", function(a, i) return a:index_select(1, i) end, x, none)
    both("index_select of an empty input", function(a, i) return a:index_select(2, i) end, tide.zeros(0, 3),
      tide.tensor({ 1, 3 }, "int64"))
    both("index_select of a 0-d input", function(a, i) return a:index_select(1, i) end, tide.tensor(5),
      tide.tensor({ 1 }, "int32"))
    both("index_select by a 0-d index", function(a, i) return a:index_select(-1, i) end, x, tide.tensor(2, "int64"))
    both("gather of an empty index", function(a, i) return a:gather(2, i) end, x, tide.zeros({ 4, 0 }, "int64"))
    both("gather of a 0-d input", function(a, i) return a:gather(1, i) end, tide.tensor(5), tide.tensor(1, "int64"))
    both("gather of a 0-d input by a 1-d index", function(a, i) return a:gather(1, i) end, tide.tensor(5),
      tide.tensor({ 1, 1, 1 }, "int32"))
    both("scatter of an empty index", function(a, i, s) return a:scatter(1, i, s) end, tide.ones(2, 2),
      tide.zeros({ 0, 2 }, "int64"), tide.zeros(0, 2))
    both("scatter_add into an empty input", function(a, i, s) return a:scatter_add(2, i, s) end, tide.zeros(0, 2),
      tide.zeros({ 0, 2 }, "int64"), tide.zeros(0, 2))
    both("scatter into a 0-d input", function(a, i, s) return a:scatter(1, i, s) end, tide.tensor(5),
      tide.tensor(1, "int64"), tide.tensor(7))
    both("scatter into a 0-d input, repeated", function(a, i, s) return a:scatter(1, i, s) end, tide.tensor(5),
      tide.tensor({ 1, 1, 1 }, "int64"), tide.tensor({ 7, 8, 9 }))
    both("scatter_add into a 0-d input", function(a, i, s) return a:scatter_add(1, i, s) end, tide.tensor(5),
      tide.tensor(1, "int64"), tide.tensor(7))
    both("index_add of an empty index", function(a, i, s) return a:index_add(1, i, s) end, tide.ones(2, 2), none,
      tide.zeros(0, 2))
    both("index_add into a 0-d input", function(a, i, s) return a:index_add(1, i, s) end, tide.tensor(5),
      tide.tensor({ 1 }, "int64"), tide.tensor(2))
    both("masked_select of nothing", function(a) return a:masked_select(a:gt(100)) end, x)
    both("masked_select of an empty input", function(a, m) return a:masked_select(m) end, tide.zeros(0, 3),
      tide.zeros({ 0, 3 }, "bool"))
    both("masked_select of a 0-d input", function(a, m) return a:masked_select(m) end, tide.tensor(5),
      tide.tensor(true))
    both("masked_select by a false 0-d mask", function(a, m) return a:masked_select(m) end, tide.tensor(5),
      tide.tensor(false))
    both("masked_select by a true 0-d mask", function(a, m) return a:masked_select(m) end, x, tide.tensor(true))
  end)

  on_gpu("a bad index raises the CPU's error, naming the first bad element", function()
    local x = values({ 4, 5 }, "float32", 11)
    for _, idt in ipairs { "int32", "int64" } do
      raises("index_select: index 7 is out of range for dimension 2 of size 5",
        function(a, i) return a:index_select(2, i) end, x, tide.tensor({ 1, 7, 9, 0 }, idt))
      raises("index_select: index 0 is out of range for dimension 1 of size 4",
        function(a, i) return a:index_select(-2, i) end, x, tide.tensor({ 4, 0 }, idt))
      raises("index_select: index -1 is out of range for dimension 1 of size 4",
        function(a, i) return a:index_select(1, i) end, x, tide.tensor(-1, idt))
      raises("gather: index 6 is out of range for dimension 2 of size 5",
        function(a, i) return a:gather(2, i) end, x, tide.tensor({ { 1, 2 }, { 6, 1 }, { 9, 1 } }, idt))
      raises("scatter: index 7 is out of range for dimension 2 of size 5",
        function(a, i, s) return a:scatter(2, i, s) end, x, tide.tensor({ { 1, 7 }, { 8, 1 } }, idt), tide.ones(2, 2))
      raises("scatter_add: index 0 is out of range for dimension 1 of size 4",
        function(a, i, s) return a:scatter_add(1, i, s) end, x, tide.tensor({ { 1, 0 } }, idt), tide.ones(1, 2))
      raises("index_add: index 5 is out of range for dimension 1 of size 4",
        function(a, i, s) return a:index_add(1, i, s) end, x, tide.tensor({ 2, 5, 6 }, idt), tide.ones(3, 5))
    end
    raises("index_select: index 1 is out of range for dimension 1 of size 0",
      function(a, i) return a:index_select(1, i) end, tide.zeros(0, 3), tide.tensor({ 1 }, "int64"))
    -- the first in the index's row-major order, not in its memory's: a transposed index
    local idx = tide.tensor({ { 1, 7 }, { 9, 1 } }, "int64")
    for _, il in ipairs { "transposed", "strided" } do
      local hi, gi = pair(idx, il)
      for _, i in ipairs { hi, gi } do
        local a = i:device() == "cpu" and x or x:to(DEV)
        local ok, err = pcall(function() return C.flat(a:gather(2, i)) end)
        assert.is_false(ok)
        assert.matches("gather: index 7 is out of range for dimension 2 of size 5", tostring(err), 1, true)
        tide.sync()   -- the read raised the failure: not again
      end
    end
    -- one bad element among 100000, and a later one
    local big = indices({ 100000 }, 1000, 16)
    big:narrow(1, 77778, 1):fill_(1001)
    big:narrow(1, 99990, 1):fill_(-3)
    raises("index_select: index 1001 is out of range for dimension 1 of size 1000",
      function(a, i) return a:index_select(1, i) end, tide.zeros(1000, 2), big)
    raises("scatter: index 1001 is out of range for dimension 1 of size 1000",
      function(a, i, s) return a:scatter(1, i, s) end, tide.zeros(1000), big, tide.ones(100000))
  end)

  on_gpu("an in-place scatter with a bad index fails on both devices alike", function()
    -- The kernels write nothing once an index is bad, as the CPU's; the engine
    -- then poisons the destination, so that it fails when read on either.
    for _, name in ipairs { "scatter_", "scatter_add_", "index_add_" } do
      local x = values({ 4, 5 }, "float32", 12)
      local idx = name == "index_add_" and tide.tensor({ 1, 8 }, "int64") or tide.tensor({ { 1, 8 } }, "int64")
      local src = name == "index_add_" and tide.ones(4, 2) or tide.ones(1, 2)
      local msg = ("%s: index 8 is out of range for dimension 2 of size 5"):format(name:sub(1, -2))
      for _, dev in ipairs { "cpu", DEV } do
        local a = x:clone():to(dev)
        local ok, err = pcall(function() return C.flat(a[name](a, 2, idx:to(dev), src:to(dev))) end)
        assert.is_false(ok, name .. " on " .. dev)
        assert.matches(msg, tostring(err), 1, true)
        ok, err = pcall(C.flat, a)
        tide.sync()   -- the reads raised the failure: not again
        assert.is_false(ok, name .. ": reading its destination on " .. dev)
        assert.matches(msg, tostring(err), 1, true)
      end
    end
  end)
end)
