-- data_spec: TensorDataset (rows, 1-based) and DataLoader: batch order, the
-- last partial batch and drop_last, seeded shuffling that is reproducible per
-- epoch and leaves the global generator alone, the prefetch of the next batch,
-- generic datasets and their collation, and the errors.
local tide = require "tide"
local data = tide.data

-- x[i] = {2y, 2y + 1} for y = i - 1: a batch's rows can be checked against its labels.
local function dataset(n)
  return data.TensorDataset(tide.arange(2 * n):view(n, 2), tide.arange(n))
end

-- The labels of each batch of one epoch, checking that x rows follow them.
local function epoch(loader)
  local r = {}
  for xb, yb in loader:iter() do
    local ys = yb:totable()
    for i, y in ipairs(ys) do assert.are.same({ 2 * y, 2 * y + 1 }, xb:totable()[i]) end
    r[#r + 1] = ys
  end
  return r
end

local function flat(batches)
  local r = {}
  for _, b in ipairs(batches) do for _, v in ipairs(b) do r[#r + 1] = v end end
  return r
end

local function is_permutation(list, n)
  local sorted = { unpack(list) }
  table.sort(sorted)
  for i = 1, n do if sorted[i] ~= i - 1 then return false end end
  return #sorted == n
end

describe("tide.data.TensorDataset", function()
  it("batches tensors on any device, each batch on its tensor's device", function()
    local x = tide.arange(12):view(6, 2):to("cpu:1")
    local y = tide.arange(6)   -- on the default device
    local loader = data.DataLoader(data.TensorDataset(x, y), { batch_size = 4, shuffle = true, seed = 3 })
    local rows = 0
    for xb, yb in loader:iter() do
      assert.are.equal("cpu:1", xb:device())
      assert.are.equal(tide.get_default_device(), yb:device())
      local ys, xs = yb:totable(), xb:totable()
      for i = 1, #ys do assert.are.same({ 2 * ys[i], 2 * ys[i] + 1 }, xs[i]) end
      rows = rows + yb:size(1)
    end
    assert.are.equal(6, rows)
  end)

  it("gives the rows of each tensor, 1-based, and its length", function()
    local x, y = tide.arange(12):view(4, 3), tide.tensor({ 10, 20, 30, 40 }, "int64")
    local ds = data.TensorDataset(x, y)
    assert.are.equal(4, #ds)
    assert.are.equal(4, ds:len())
    local a, b = ds:get(2)
    assert.are.same({ 3, 4, 5 }, a:totable())
    assert.are.equal(20, b:item())
    local r = ds[4]
    assert.are.same({ 9, 10, 11 }, r[1]:totable())
    assert.are.equal(40, r[2]:item())
    assert.are.same({ 9, 10, 11 }, (ds:get(-1)):totable())
    assert.are.equal("TensorDataset(4 rows: [4,3] int64, [4] int64)", tostring(ds))
  end)

  it("rejects tensors that do not fit and indices out of range", function()
    local x = tide.zeros(4, 3)
    assert.has_error(function() data.TensorDataset() end, "TensorDataset: expects at least one tensor")
    assert.has_error(function() data.TensorDataset(x, tide.zeros(3)) end,
      "TensorDataset: tensor 2 has 3 rows but tensor 1 has 4")
    assert.has_error(function() data.TensorDataset(x, 5) end, "TensorDataset: argument 2 must be a tensor, got number")
    assert.has_error(function() data.TensorDataset(tide.tensor(1)) end,
      "TensorDataset: tensor 1 is 0-d; it needs a first dimension")
    local ds = data.TensorDataset(x)
    assert.has_error(function() ds:get(5) end, "TensorDataset: index 5 is out of range for 4 rows")
    assert.has_error(function() ds:get(0) end, "TensorDataset: index 0 is out of range for 4 rows")
    assert.has_error(function() return ds[1.5] end, "TensorDataset: index 1.5 is out of range for 4 rows")
  end)
end)

describe("tide.data.DataLoader", function()
  it("batches in order, with a last partial batch; #loader counts batches", function()
    local loader = data.DataLoader(dataset(10), { batch_size = 4 })
    assert.are.equal(3, #loader)
    local want = { { 0, 1, 2, 3 }, { 4, 5, 6, 7 }, { 8, 9 } }
    assert.are.same(want, epoch(loader))
    assert.are.same(want, epoch(loader))   -- unshuffled: every epoch alike
    local got = {}
    for xb, yb in loader do   -- the loader itself as the iterator
      assert.are.equal(2, xb:size(2))
      got[#got + 1] = yb:totable()
    end
    assert.are.same(want, got)
    for _, yb in loader do got = yb:totable() break end   -- a new loop starts a new epoch
    assert.are.same({ 0, 1, 2, 3 }, got)
    assert.are.equal("DataLoader(10 items, batch_size 4, 3 batches)", tostring(loader))
    assert.are.same({ { 0 }, { 1 } }, epoch(data.DataLoader(dataset(2))))   -- batch_size 1 by default
  end)

  it("drops the last partial batch with drop_last", function()
    local loader = data.DataLoader(dataset(10), { batch_size = 4, drop_last = true })
    assert.are.equal(2, #loader)
    assert.are.same({ { 0, 1, 2, 3 }, { 4, 5, 6, 7 } }, epoch(loader))
    assert.are.equal(0, #data.DataLoader(dataset(10), { batch_size = 20, drop_last = true }))
    assert.are.same({}, epoch(data.DataLoader(dataset(10), { batch_size = 20, drop_last = true })))
    assert.are.same({ { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 } }, epoch(data.DataLoader(dataset(10), { batch_size = 20 })))
    assert.are.same({}, epoch(data.DataLoader(dataset(0), { batch_size = 3, shuffle = true, seed = 1 })))
  end)

  it("shuffles reproducibly with a seed, a new order each epoch, leaving the global generator alone", function()
    local ds = dataset(10)
    local opts = { batch_size = 3, shuffle = true, seed = 7 }
    tide.manual_seed(1)
    local a = data.DataLoader(ds, opts)
    local a1, a2, a3 = epoch(a), epoch(a), epoch(a)
    tide.manual_seed(999)
    local b = data.DataLoader(ds, opts)
    assert.are.same({ a1, a2, a3 }, { epoch(b), epoch(b), epoch(b) })
    for _, e in ipairs({ a1, a2, a3 }) do
      assert.is_true(is_permutation(flat(e), 10))
      assert.are.same({ 3, 3, 3, 1 }, { #e[1], #e[2], #e[3], #e[4] })
    end
    assert.are_not.same(flat(a1), flat(a2))
    assert.are_not.same(flat(a1), flat(epoch(data.DataLoader(ds, { batch_size = 3, shuffle = true, seed = 8 }))))
    local c = data.DataLoader(ds, opts)
    c:set_epoch(2)
    assert.are.same(a3, epoch(c))
    -- the global stream is the same with or without the loader's draws in between
    tide.manual_seed(5)
    local r1 = tide.rand(4):totable()
    tide.manual_seed(5)
    epoch(a)
    assert.are.same(r1, tide.rand(4):totable())
  end)

  it("shuffles from the global generator without a seed", function()
    local opts = { batch_size = 4, shuffle = true }
    tide.manual_seed(3)
    local a = data.DataLoader(dataset(10), opts)
    local a1, a2 = epoch(a), epoch(a)
    tide.manual_seed(3)
    local b = data.DataLoader(dataset(10), opts)
    assert.are.same({ a1, a2 }, { epoch(b), epoch(b) })
    assert.is_true(is_permutation(flat(a1), 10))
    assert.are_not.same(flat(a1), flat(a2))
  end)

  it("enqueues the next batch's gather before it hands out the current batch", function()
    local calls, index_select = 0, tide.Tensor.index_select
    tide.Tensor.index_select = function(...) calls = calls + 1 return index_select(...) end
    local ok, err = pcall(function()
      for _, shuffle in ipairs({ false, true }) do
        calls = 0
        local loader = data.DataLoader(dataset(10), { batch_size = 4, shuffle = shuffle })
        local it = loader:iter()
        assert.are.equal(2, calls)    -- batch 1: one index_select per tensor, enqueued at once
        assert.is_not_nil(it())
        assert.are.equal(4, calls)    -- batch 2 was enqueued before batch 1 came back
        assert.is_not_nil(it())
        assert.are.equal(6, calls)
        local x, y = it()
        assert.are.same({ 2 }, y:shape())
        assert.are.equal(6, calls)    -- nothing after the last batch
        assert.is_nil(it())
        assert.is_nil(it())
      end
    end)
    tide.Tensor.index_select = index_select
    assert(ok, err)
    -- the prefetched gather runs on the engine while the caller goes on
    local big = data.TensorDataset(tide.randn(4096, 64))
    local loader = data.DataLoader(big, { batch_size = 2048, shuffle = true, seed = 3 })
    local n = 0
    for xb in loader do n = n + 1; assert.are.same({ 2048, 64 }, xb:shape()) end
    assert.are.equal(2, n)
  end)

  it("collates generic datasets: get(i) and len(), lists of tables, and __len", function()
    local calls = 0
    local ds = {
      len = function() return 5 end,
      get = function(_, i) calls = calls + 1 return tide.full({ 2 }, i), i, i % 2 == 0, "s" .. i, i / 2 end,
    }
    local loader = data.DataLoader(ds, { batch_size = 2 })
    assert.are.equal(3, #loader)
    local it = loader:iter()
    assert.are.equal(2, calls)        -- the first batch is read when the epoch starts
    local x, n, even, s, half = it()
    assert.are.equal(4, calls)        -- and the next one before a batch is handed out
    assert.are.same({ { 1, 1 }, { 2, 2 } }, x:totable())
    assert.are.equal("int64", n:dtype())
    assert.are.same({ 1, 2 }, n:totable())
    assert.are.same({ false, true }, even:totable())
    assert.are.same({ "s1", "s2" }, s)
    assert.are.equal("float64", half:dtype())
    it()
    assert.are.equal(5, calls)
    local last = it()
    assert.are.same({ { 5, 5 } }, last:totable())
    assert.is_nil(it())

    local samples = {
      { x = tide.ones(2), label = 1, meta = { id = 7 } },
      { x = tide.zeros(2), label = 0, meta = { id = 8 } },
      { x = tide.ones(2) * 2, label = 1, meta = { id = 9 } },
    }
    local batches = {}
    for b in data.DataLoader(samples, { batch_size = 2, shuffle = true, seed = 1 }) do batches[#batches + 1] = b end
    assert.are.equal(2, #batches)
    assert.are.same({ 2, 2 }, batches[1].x:shape())
    assert.are.equal("int64", batches[1].label:dtype())
    assert.are.equal(2, batches[1].meta.id:numel())
    local ids = {}
    for _, b in ipairs(batches) do for _, id in ipairs(b.meta.id:totable()) do ids[#ids + 1] = id end end
    table.sort(ids)
    assert.are.same({ 7, 8, 9 }, ids)

    local with_len = setmetatable({}, { __len = function() return 3 end, __index = function(_, i) return tide.full({}, i) end })
    assert.are.same({ { 1, 2 }, { 3 } }, (function()
      local r = {}
      for b in data.DataLoader(with_len, { batch_size = 2 }) do r[#r + 1] = b:totable() end
      return r
    end)())
    assert.are.same({ { 0, 1 }, { 2 } }, (function()   -- a tensor is a dataset of its rows
      local r = {}
      for b in data.DataLoader(tide.arange(3), { batch_size = 2 }) do r[#r + 1] = b:totable() end
      return r
    end)())
  end)

  it("rejects bad options and inconsistent samples", function()
    local ds = dataset(4)
    assert.has_error(function() data.DataLoader(ds, { batch_size = 0 }) end,
      "DataLoader: batch_size must be a positive integer, got 0")
    assert.has_error(function() data.DataLoader(ds, { batchsize = 2 }) end, "DataLoader: unknown option 'batchsize'")
    assert.has_error(function() data.DataLoader(ds, { shuffle = "yes" }) end,
      "DataLoader: shuffle must be a boolean, got string")
    assert.has_error(function() data.DataLoader(ds, { seed = -1 }) end,
      "DataLoader: seed must be a non-negative integer, got -1")
    assert.has_error(function() data.DataLoader(5) end, "DataLoader: dataset must be a table or a dataset object, got number")
    assert.has_error(function() data.DataLoader(ds):set_epoch(-1) end,
      "set_epoch: epoch must be a non-negative integer, got -1")
    local mixed = { tide.ones(1), 2 }
    assert.has_error(function() data.DataLoader(mixed, { batch_size = 2 }):iter() end,
      "DataLoader: value 1 is a tensor in sample 1 but a number in sample 2 of the batch")
    local holes = { get = function() return nil end, len = function() return 1 end }
    assert.has_error(function() data.DataLoader(holes):iter() end, "DataLoader: the dataset returned nothing for item 1")
    local ragged = { tide.ones(2), tide.ones(3) }
    assert.has_error(function() data.DataLoader(ragged, { batch_size = 2 }):iter() end)
  end)
end)
