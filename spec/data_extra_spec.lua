-- data_extra_spec: Subset, ConcatDataset and random_split; the samplers
-- (sequential, random, subset-random, weighted, batch) and DataLoader's
-- sampler, batch_sampler and collate_fn: the indices and items each gives,
-- lengths, seeded reproducibility that leaves the global generator alone,
-- weighted frequencies, gathers kept for Subsets and ConcatDatasets, errors.
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
    local ys, xs = yb:totable(), xb:totable()
    for i, y in ipairs(ys) do assert.are.same({ 2 * y, 2 * y + 1 }, xs[i]) end
    r[#r + 1] = ys
  end
  return r
end

-- Every index a sampler (or anything with iter()) gives in one epoch.
local function drain(s)
  local r = {}
  for i in s:iter() do r[#r + 1] = i end
  return r
end

local function sorted(list)
  local r = { unpack(list) }
  table.sort(r)
  return r
end

local function range(a, b)
  local r = {}
  for i = a, b do r[#r + 1] = i end
  return r
end

-- Runs fn with TensorDataset's get and Tensor.index_select counted; returns the counts.
local function counting(fn)
  local class, index_select = data.TensorDataset_class, tide.Tensor.index_select
  local get, counts = class.get, { get = 0, index_select = 0 }
  class.get = function(...) counts.get = counts.get + 1 return get(...) end
  tide.Tensor.index_select = function(...) counts.index_select = counts.index_select + 1 return index_select(...) end
  local ok, err = pcall(fn)
  class.get, tide.Tensor.index_select = get, index_select
  assert(ok, err)
  return counts
end

-- The global stream is the same with or without fn's draws in between.
local function leaves_global_alone(fn)
  tide.manual_seed(5)
  local r1 = tide.rand(4):totable()
  tide.manual_seed(5)
  fn()
  assert.are.same(r1, tide.rand(4):totable())
end

describe("tide.data.Subset", function()
  it("gives the items at its indices, from a list or an integer tensor", function()
    local ds = dataset(10)
    local s = data.Subset(ds, { 3, 1, 10 })
    assert.are.equal(3, #s)
    assert.are.equal(3, s:len())
    local x, y = s:get(1)
    assert.are.same({ 4, 5 }, x:totable())
    assert.are.equal(2, y:item())
    assert.are.equal(9, select(2, s:get(-1)):item())
    assert.are.equal(0, s[2][2]:item())   -- s[i] is ds[j]: the table of values
    assert.are.same({ 3, 1, 10 }, s.indices)
    assert.are.same({ 6, 7 }, data.Subset(ds, tide.tensor({ 6, 7 }, "int32")).indices)
    local items = data.Subset({ "a", "b", "c" }, { 3, 3, 1 })
    assert.are.same({ "c", "c", "a" }, { items:get(1), items[2], items:get(3) })
    assert.are.same({ 2 }, data.Subset(data.Subset(ds, { 5, 6, 7 }), { 2 }).indices)
    assert.are.equal(6, select(2, data.Subset(data.Subset(ds, { 5, 6, 7 }), { 3 }):get(1)):item())
    assert.are.equal("Subset(3 items of TensorDataset(10 rows: [10,2] int64, [10] int64))", tostring(s))
  end)

  it("batches a Subset of a TensorDataset by gathers of the mapped indices", function()
    local s = data.Subset(dataset(10), { 10, 8, 6, 4, 2 })
    local counts = counting(function()
      assert.are.same({ { 9, 7 }, { 5, 3 }, { 1 } }, epoch(data.DataLoader(s, { batch_size = 2 })))
    end)
    assert.are.equal(0, counts.get)            -- never item by item
    assert.are.equal(3 * 3, counts.index_select)   -- per batch: the map, then one per tensor
    local nested = data.Subset(data.Subset(dataset(10), { 10, 8, 6, 4, 2 }), { 5, 1 })
    counts = counting(function()
      assert.are.same({ { 1, 9 } }, epoch(data.DataLoader(nested, { batch_size = 2 })))
    end)
    assert.are.same({ get = 0, index_select = 4 }, counts)
    local got = {}
    for b in data.DataLoader(data.Subset({ 5, 6, 7 }, { 3, 1 }), { batch_size = 2 }) do got = b:totable() end
    assert.are.same({ 7, 5 }, got)   -- other datasets, item by item
  end)

  it("rejects bad indices", function()
    local ds = dataset(4)
    assert.has_error(function() data.Subset(ds, { 1, 5 }) end, "Subset: indices[2] = 5 is out of range for 4 items")
    assert.has_error(function() data.Subset(ds, { 0 }) end, "Subset: indices[1] must be a positive integer, got 0")
    assert.has_error(function() data.Subset(ds, { 1.5 }) end, "Subset: indices[1] must be a positive integer, got 1.5")
    assert.has_error(function() data.Subset(ds, tide.ones(2)) end,
      "Subset: indices must be a 1-d integer tensor, got a 1-d float32 tensor")
    assert.has_error(function() data.Subset(ds, 3) end,
      "Subset: indices must be a list or a 1-d integer tensor of indices, got number")
    assert.has_error(function() data.Subset(ds, { 1 }):get(2) end, "Subset: index 2 is out of range for 1 items")
  end)
end)

describe("tide.data.ConcatDataset", function()
  it("joins datasets one after the other", function()
    local a, b = dataset(3), data.TensorDataset(tide.arange(10, 14):view(2, 2), tide.arange(5, 7))
    local c = data.ConcatDataset({ a, b, dataset(1) })
    assert.are.equal(6, #c)
    assert.are.same({ 3, 5, 6 }, c.cumulative_sizes)
    local labels = {}
    for i = 1, 6 do labels[i] = select(2, c:get(i)):item() end
    assert.are.same({ 0, 1, 2, 5, 6, 0 }, labels)
    assert.are.same({ 12, 13 }, c[5][1]:totable())
    assert.are.equal(5, select(2, c:get(-3)):item())
    local mixed = data.ConcatDataset({ { "a", "b" }, { "c" } })
    assert.are.same({ "a", "b", "c" }, { mixed:get(1), mixed[2], mixed:get(3) })
    assert.are.equal("ConcatDataset(3 items of 2 datasets)", tostring(mixed))
  end)

  it("batches ConcatDatasets of TensorDatasets by gathers, in the sampled order", function()
    local c = data.ConcatDataset({ dataset(5), data.Subset(dataset(10), { 6, 7, 8, 9, 10 }) })
    local loader = data.DataLoader(c, { batch_size = 4, shuffle = true, seed = 2 })
    local batches
    local counts = counting(function() batches = epoch(loader) end)
    assert.are.equal(0, counts.get)
    local all = {}
    for _, b in ipairs(batches) do for _, y in ipairs(b) do all[#all + 1] = y end end
    assert.are.same(range(0, 9), sorted(all))   -- labels 0..4, then 5..9 from the Subset
    counts = counting(function()
      assert.are.same({ { 0, 1, 2 } }, epoch(data.DataLoader(c, { sampler = { 1, 2, 3 }, batch_size = 4 })))
    end)
    assert.are.same({ get = 0, index_select = 2 }, counts)   -- one dataset: its gather alone
    counts = counting(function()
      assert.are.same({ { 9, 0, 5 } }, epoch(data.DataLoader(c, { sampler = { 10, 1, 6 }, batch_size = 4 })))
    end)
    -- two datasets: a gather per tensor from each (and the Subset's map), then one to order the rows
    assert.are.same({ get = 0, index_select = 2 + 3 + 2 }, counts)
    local items = data.ConcatDataset({ dataset(2), { { tide.tensor({ 8, 9 }, "int64"), tide.tensor(4, "int64") } } })
    local got = {}
    for _, yb in data.DataLoader(items, { batch_size = 3, collate_fn = function(list)
      local ys = {}
      for i, it in ipairs(list) do ys[i] = it[2] end
      return list[1][1], tide.stack(ys)
    end }) do got = yb:totable() end
    assert.are.same({ 0, 1, 4 }, got)
  end)

  it("rejects what is not a non-empty list of datasets", function()
    assert.has_error(function() data.ConcatDataset({}) end,
      "ConcatDataset: expects a non-empty list of datasets, got an empty or non-list table")
    assert.has_error(function() data.ConcatDataset(dataset(2)) end,
      "ConcatDataset: expects a non-empty list of datasets, got userdata")
    assert.has_error(function() data.ConcatDataset({ dataset(2), 3 }) end,
      "ConcatDataset: dataset 2 must be a table or a dataset object, got number")
    assert.has_error(function() data.ConcatDataset({ dataset(2) }):get(3) end,
      "ConcatDataset: index 3 is out of range for 2 items")
  end)
end)

describe("tide.data.random_split", function()
  local function sizes(...)
    local r = {}
    for k, s in ipairs({ ... }) do r[k] = #s end
    return r
  end

  it("splits by counts or by fractions, with PyTorch's rounding", function()
    local ds = dataset(11)
    assert.are.same({ 3, 8 }, sizes(data.random_split(ds, { 3, 8 }, { seed = 1 })))
    assert.are.same({ 4, 3, 4 }, sizes(data.random_split(ds, { 0.3, 0.3, 0.4 })))   -- 3, 3, 4 and one left over
    assert.are.same({ 6, 5 }, sizes(data.random_split(ds, { 0.5, 0.5 })))
    assert.are.same({ 9, 1, 1 }, sizes(data.random_split(ds, { 0.8, 0.1, 0.1 })))   -- 8, 1, 1 and one
    assert.are.same({ 0, 11 }, sizes(data.random_split(ds, { 0, 1 })))
    local a, b, c = data.random_split(ds, { 4, 4, 3 }, { seed = 3 })
    local all = {}
    for _, s in ipairs({ a, b, c }) do for _, i in ipairs(s.indices) do all[#all + 1] = i end end
    assert.are.same(range(1, 11), sorted(all))   -- disjoint, and together the dataset
    assert.are_not.same(range(1, 11), all)
  end)

  it("splits reproducibly with a seed, leaving the global generator alone", function()
    local ds = dataset(20)
    tide.manual_seed(1)
    local a = data.random_split(ds, { 10, 10 }, { seed = 7 })
    tide.manual_seed(2)
    local b = data.random_split(ds, { 10, 10 }, { seed = 7 })
    assert.are.same(a.indices, b.indices)
    assert.are_not.same(a.indices, (data.random_split(ds, { 10, 10 }, { seed = 8 })).indices)
    leaves_global_alone(function() data.random_split(ds, { 10, 10 }, { seed = 7 }) end)
    tide.manual_seed(4)
    local g1 = data.random_split(ds, { 10, 10 })
    tide.manual_seed(4)
    assert.are.same(g1.indices, (data.random_split(ds, { 10, 10 })).indices)   -- the global generator's draws
  end)

  it("rejects lengths that do not fit", function()
    local ds = dataset(10)
    assert.has_error(function() data.random_split(ds, { 3, 3 }) end,
      "random_split: the lengths sum to 6 but the dataset has 10 items")
    assert.has_error(function() data.random_split(ds, { 2.5, 7.5 }) end,
      "random_split: lengths[1] = 2.5 is neither a count nor a fraction")
    assert.has_error(function() data.random_split(ds, { -1, 11 }) end,
      "random_split: lengths[1] must be a non-negative number, got -1")
    assert.has_error(function() data.random_split(ds, {}) end, "random_split: lengths must be a non-empty list of numbers")
    assert.has_error(function() data.random_split(ds, { 10 }, { seed = 1.5 }) end,
      "random_split: seed must be a non-negative integer, got 1.5")
    assert.has_error(function() data.random_split(ds, { 10 }, { sed = 1 }) end, "random_split: unknown option 'sed'")
  end)
end)

describe("tide.data samplers", function()
  it("SequentialSampler and SubsetRandomSampler give their indices", function()
    local s = data.SequentialSampler(dataset(4))
    assert.are.equal(4, #s)
    assert.are.same({ 1, 2, 3, 4 }, drain(s))
    assert.are.same({ 1, 2, 3, 4 }, s:order():totable())
    assert.are.same({}, drain(data.SequentialSampler(dataset(0))))
    local r = data.SubsetRandomSampler({ 2, 4, 6, 8 }, { seed = 1 })
    assert.are.equal(4, #r)
    local e1, e2 = drain(r), drain(r)
    assert.are.same({ 2, 4, 6, 8 }, sorted(e1))
    assert.are_not.same(e1, e2)
    assert.are.same({ 3, 5 }, sorted(drain(data.SubsetRandomSampler(tide.tensor({ 5, 3 }, "int64")))))
    assert.are.equal("SubsetRandomSampler(4 indices, seed 1)", tostring(r))
  end)

  it("RandomSampler permutes, chains permutations or draws with replacement", function()
    local ds = dataset(10)
    local s = data.RandomSampler(ds, { seed = 3 })
    assert.are.equal(10, #s)
    local e1, e2 = drain(s), drain(s)
    assert.are.same(range(1, 10), sorted(e1))
    assert.are.same(range(1, 10), sorted(e2))
    assert.are_not.same(e1, e2)
    local again = data.RandomSampler(ds, { seed = 3 })
    assert.are.same(e1, drain(again))
    again:set_epoch(1)
    assert.are.same(e2, drain(again))
    leaves_global_alone(function() drain(s) end)
    local long = drain(data.RandomSampler(ds, { num_samples = 25, seed = 1 }))
    assert.are.equal(25, #long)
    local seen = {}
    for _, i in ipairs(long) do seen[i] = (seen[i] or 0) + 1 end
    for i = 1, 10 do assert.is_true(seen[i] == 2 or seen[i] == 3) end   -- 2 permutations and half of one
    local with = data.RandomSampler(ds, { replacement = true, num_samples = 200, seed = 1 })
    assert.are.equal(200, #with)
    local draws, seen_once, distinct = drain(with), {}, {}
    for _, i in ipairs(draws) do
      assert.is_true(i >= 1 and i <= 10)
      if not seen_once[i] then seen_once[i], distinct[#distinct + 1] = true, i end
    end
    assert.are.equal(200, #draws)
    assert.are.same(range(1, 10), sorted(distinct))   -- 200 draws reach all ten
    tide.manual_seed(9)
    local g = drain(data.RandomSampler(ds))
    tide.manual_seed(9)
    assert.are.same(g, drain(data.RandomSampler(ds)))   -- from the global generator without a seed
  end)

  it("WeightedRandomSampler draws in proportion to the weights", function()
    local w = { 1, 0, 3, 6 }
    local s = data.WeightedRandomSampler(w, 20000, { seed = 1 })
    assert.are.equal(20000, #s)
    local count = { 0, 0, 0, 0 }
    for _, i in ipairs(s:order():totable()) do count[i] = count[i] + 1 end
    assert.are.equal(0, count[2])   -- a zero weight is never drawn
    for i, p in ipairs({ 0.1, 0, 0.3, 0.6 }) do   -- 4.5 standard deviations at most
      assert.is_true(math.abs(count[i] / 20000 - p) < 0.016, "index " .. i .. " drawn " .. count[i] .. " times")
    end
    local a = data.WeightedRandomSampler(tide.tensor(w), 50, { seed = 2 })
    local b = data.WeightedRandomSampler(w, 50, { seed = 2 })
    local e0 = drain(a)
    assert.are.same(e0, drain(b))   -- from a list or a tensor alike
    local e1 = drain(a)
    assert.are_not.same(e0, e1)     -- a new draw each epoch
    b:set_epoch(1)
    assert.are.same(e1, drain(b))
    leaves_global_alone(function() drain(a) end)
    -- a weight after the last positive one, and bounds that draws can meet exactly
    local edge = drain(data.WeightedRandomSampler({ 0, 2, 2, 0 }, 2000, { seed = 3 }))
    local twos = 0
    for _, i in ipairs(edge) do
      assert.is_true(i == 2 or i == 3)
      if i == 2 then twos = twos + 1 end
    end
    assert.is_true(math.abs(twos / 2000 - 0.5) < 0.05)
  end)

  it("WeightedRandomSampler without replacement draws distinct indices, heavy ones first", function()
    local s = data.WeightedRandomSampler({ 1, 0, 3, 6 }, 3, { replacement = false, seed = 5 })
    local first = {}
    for _ = 1, 1000 do
      local e = drain(s)
      assert.are.same({ 1, 3, 4 }, sorted(e))
      first[e[1]] = (first[e[1]] or 0) + 1
    end
    -- the first draw is a weighted draw: 0.1, 0.3, 0.6 (4 standard deviations)
    assert.is_true(math.abs(first[4] / 1000 - 0.6) < 0.062, "4 first " .. first[4] .. " times")
    assert.is_true(math.abs(first[3] / 1000 - 0.3) < 0.058, "3 first " .. first[3] .. " times")
    local one = data.WeightedRandomSampler({ 5, 1 }, 1, { replacement = false, seed = 1 })
    assert.are.same(drain(data.WeightedRandomSampler({ 5, 1 }, 1, { replacement = false, seed = 1 })), drain(one))
  end)

  it("BatchSampler groups a sampler's indices", function()
    local s = data.BatchSampler(data.SequentialSampler(dataset(10)), 4, false)
    assert.are.equal(3, #s)
    assert.are.same({ { 1, 2, 3, 4 }, { 5, 6, 7, 8 }, { 9, 10 } }, drain(s))
    local d = data.BatchSampler({ 5, 4, 3, 2, 1 }, 2, true)
    assert.are.equal(2, #d)
    assert.are.same({ { 5, 4 }, { 3, 2 } }, drain(d))
    assert.are.same({ { 1, 2 }, { 3 } }, drain(data.BatchSampler(tide.tensor({ 1, 2, 3 }, "int64"), 2)))
    assert.are.equal("BatchSampler(batch_size 2, drop_last)", tostring(d))
  end)

  it("rejects bad arguments", function()
    local ds = dataset(4)
    assert.has_error(function() data.RandomSampler(ds, { num_samples = 0 }) end,
      "RandomSampler: num_samples must be a positive integer, got 0")
    assert.has_error(function() data.RandomSampler(ds, { replacement = 1 }) end,
      "RandomSampler: replacement must be a boolean, got number")
    assert.has_error(function() data.RandomSampler(ds, { seeds = 1 }) end, "RandomSampler: unknown option 'seeds'")
    assert.has_error(function() drain(data.RandomSampler(dataset(0), { num_samples = 2 })) end,
      "RandomSampler: cannot draw 2 indices from an empty dataset")
    assert.has_error(function() data.SubsetRandomSampler({ 1, -2 }) end,
      "SubsetRandomSampler: indices[2] must be a positive integer, got -2")
    assert.has_error(function() data.WeightedRandomSampler({ 1, -1 }, 2) end,
      "WeightedRandomSampler: weights[2] must be a non-negative finite number, got -1")
    assert.has_error(function() data.WeightedRandomSampler({ 1, 0 / 0 }, 2) end,
      "WeightedRandomSampler: weights[2] must be a non-negative finite number, got nan")
    assert.has_error(function() data.WeightedRandomSampler({ 0, 0 }, 2) end,
      "WeightedRandomSampler: the 2 weights are all zero")
    assert.has_error(function() data.WeightedRandomSampler({ 1, 0, 2 }, 3, { replacement = false }) end,
      "WeightedRandomSampler: cannot draw 3 samples without replacement from 2 positive weights")
    assert.has_error(function() data.WeightedRandomSampler({ 1 }, 0) end,
      "WeightedRandomSampler: num_samples must be a positive integer, got 0")
    assert.has_error(function() data.WeightedRandomSampler(tide.ones(2, 2), 1) end,
      "WeightedRandomSampler: weights must be a 1-d tensor, got 2-d")
    assert.has_error(function() data.BatchSampler({ 1 }, 0, false) end,
      "BatchSampler: batch_size must be a positive integer, got 0")
    assert.has_error(function() data.BatchSampler({ 1 }, 1, "no") end,
      "BatchSampler: drop_last must be a boolean, got string")
    assert.has_error(function() data.BatchSampler(7, 1) end,
      "BatchSampler: sampler must be a list or a 1-d integer tensor of indices, or an object with iter(), got number")
    assert.has_error(function() data.SequentialSampler(ds):set_epoch(-1) end,
      "set_epoch: epoch must be a non-negative integer, got -1")
  end)
end)

describe("tide.data.DataLoader options", function()
  it("takes its indices from a sampler, gathering a TensorDataset's batches", function()
    local ds = dataset(10)
    local counts = counting(function()
      assert.are.same({ { 9, 0, 4 }, { 2 } }, epoch(data.DataLoader(ds, { sampler = { 10, 1, 5, 3 }, batch_size = 3 })))
    end)
    assert.are.same({ get = 0, index_select = 4 }, counts)
    local s = data.RandomSampler(ds, { seed = 4 })
    local loader = data.DataLoader(ds, { sampler = s, batch_size = 4 })
    assert.are.equal(3, #loader)
    local want = data.RandomSampler(ds, { seed = 4 })
    local flat = {}
    for _, b in ipairs(epoch(loader)) do for _, y in ipairs(b) do flat[#flat + 1] = y + 1 end end
    assert.are.same(drain(want), flat)
    loader:set_epoch(3)   -- the sampler's epoch too
    flat = {}
    for _, b in ipairs(epoch(loader)) do for _, y in ipairs(b) do flat[#flat + 1] = y + 1 end end
    want:set_epoch(3)
    assert.are.same(drain(want), flat)
    local weighted = data.DataLoader(ds, { sampler = data.WeightedRandomSampler(tide.ones(10), 7, { seed = 1 }),
      batch_size = 2, drop_last = true })
    assert.are.equal(3, #weighted)
    assert.are.same({ 2, 2, 2 }, (function()
      local r = {}
      for _, b in ipairs(epoch(weighted)) do r[#r + 1] = #b end
      return r
    end)())
    -- any object with iter() and len(): its indices are checked
    local custom = { iter = function() return coroutine.wrap(function() for i = 4, 1, -1 do coroutine.yield(i) end end) end,
      len = function() return 4 end }
    loader = data.DataLoader(ds, { sampler = custom, batch_size = 3 })
    assert.are.equal(2, #loader)
    assert.are.same({ { 3, 2, 1 }, { 0 } }, epoch(loader))
    assert.are.same({ { "d", "c" }, { "b", "a" } }, (function()
      local r = {}
      for b in data.DataLoader({ "a", "b", "c", "d" }, { sampler = custom, batch_size = 2 }) do r[#r + 1] = b end
      return r
    end)())
    local wild = { iter = function() local k = 0 return function() k = k + 1 if k <= 2 then return 11 end end end }
    assert.has_error(function() data.DataLoader(ds, { sampler = wild, batch_size = 2 }):iter() end,
      "DataLoader: the sampler's batch[1] = 11 is out of range for 10 items")
    assert.has_error(function() return #data.DataLoader(ds, { sampler = wild }) end, "DataLoader: the sampler has no len()")
    assert.has_error(function() data.DataLoader(dataset(3), { sampler = data.SequentialSampler(ds) }):iter() end,
      "DataLoader: the sampler gives indices up to 10 but the dataset has 3 items")
  end)

  it("takes whole batches from a batch_sampler", function()
    local ds = dataset(10)
    local bs = data.BatchSampler(data.SubsetRandomSampler({ 1, 2, 3, 4, 5 }, { seed = 1 }), 2, true)
    local loader = data.DataLoader(ds, { batch_sampler = bs })
    assert.are.equal(2, #loader)
    local counts = counting(function()
      local e = epoch(loader)
      assert.are.same({ 2, 2 }, { #e[1], #e[2] })
      for _, b in ipairs(e) do for _, y in ipairs(b) do assert.is_true(y >= 0 and y <= 4) end end
    end)
    -- the inner sampler's order (one index_select to permute), cut, each part gathered
    assert.are.same({ get = 0, index_select = 1 + 2 * 2 }, counts)
    local listed = { { 5, 1 }, tide.tensor({ 10 }, "int64") }   -- a list of batches, as lists or tensors
    assert.are.same({ { 4, 0 }, { 9 } }, epoch(data.DataLoader(ds, { batch_sampler = listed })))
    local strs = data.DataLoader({ "a", "b", "c" }, { batch_sampler = data.BatchSampler({ 3, 1, 2 }, 2, false) })
    local r = {}
    for b in strs do r[#r + 1] = b end
    assert.are.same({ { "c", "a" }, { "b" } }, r)
    assert.has_error(function() data.DataLoader(ds, { batch_sampler = { { 1, 0 } } }):iter() end,
      "DataLoader: the batch_sampler's batch[2] must be a positive integer, got 0")
    assert.has_error(function() data.DataLoader(ds, { batch_sampler = { 3 } }):iter() end,
      "DataLoader: the batch_sampler gave a number, not a list or a 1-d integer tensor of indices")
  end)

  it("collates with a collate_fn given the list of a batch's items", function()
    local seen
    local loader = data.DataLoader(dataset(5), { batch_size = 2, collate_fn = function(items)
      seen = items
      local ys = {}
      for i, it in ipairs(items) do ys[i] = it[2]:item() * 10 end
      return ys, #items
    end })
    local it = loader:iter()
    local ys, n = it()
    assert.are.same({ 0, 10 }, ys)
    assert.are.equal(2, n)
    assert.are.equal(2, #seen[1])   -- a TensorDataset's item: its values, as a table
    it()
    assert.are.same({ 40 }, (it()))
    assert.is_nil(it())
    local single = data.DataLoader({ 3, 4, 5 }, { batch_size = 3, collate_fn = function(items) return items end })
    for b in single do assert.are.same({ 3, 4, 5 }, b) end   -- one value: the item itself
    assert.has_error(function() data.DataLoader({ 1 }, { collate_fn = function() end }):iter() end,
      "DataLoader: collate_fn returned nothing for a batch")
  end)

  it("rejects options that exclude each other", function()
    local ds = dataset(4)
    local s = data.SequentialSampler(ds)
    local b = data.BatchSampler(s, 2, false)
    assert.has_error(function() data.DataLoader(ds, { sampler = s, shuffle = true }) end,
      "DataLoader: sampler and shuffle are mutually exclusive")
    assert.has_error(function() data.DataLoader(ds, { batch_sampler = b, batch_size = 2 }) end,
      "DataLoader: batch_sampler and batch_size are mutually exclusive")
    assert.has_error(function() data.DataLoader(ds, { batch_sampler = b, shuffle = true }) end,
      "DataLoader: batch_sampler and shuffle are mutually exclusive")
    assert.has_error(function() data.DataLoader(ds, { batch_sampler = b, sampler = s }) end,
      "DataLoader: batch_sampler and sampler are mutually exclusive")
    assert.has_error(function() data.DataLoader(ds, { batch_sampler = b, drop_last = true }) end,
      "DataLoader: batch_sampler and drop_last are mutually exclusive")
    assert.has_error(function() data.DataLoader(ds, { sampler = s, seed = 1 }) end,
      "DataLoader: seed and sampler are mutually exclusive (seed the sampler)")
    assert.has_error(function() data.DataLoader(ds, { batch_sampler = b, seed = 1 }) end,
      "DataLoader: seed and batch_sampler are mutually exclusive (seed the sampler)")
    assert.has_error(function() data.DataLoader(ds, { collate_fn = 1 }) end,
      "DataLoader: collate_fn must be a function, got number")
    assert.has_error(function() data.DataLoader(ds, { sampler = true }) end,
      "DataLoader: sampler must be a list or a 1-d integer tensor of indices, or an object with iter(), got boolean")
    assert.has_error(function() data.DataLoader(ds, { batch_sampler = 2 }) end,
      "DataLoader: batch_sampler must be a list of batches or an object with iter(), got number")
    -- what PyTorch allows alongside: the defaults spelled out
    data.DataLoader(ds, { batch_sampler = b, batch_size = 1, shuffle = false, drop_last = false })
    data.DataLoader(ds, { sampler = s, shuffle = false })
  end)
end)
