--- tide.data: datasets, samplers and batches, after PyTorch's torch.utils.data.
-- `TensorDataset(x, y)` holds tensors that share their first dimension;
-- `Subset`, `ConcatDataset` and `random_split` pick and join datasets;
-- samplers (`SequentialSampler`, `RandomSampler`, `SubsetRandomSampler`,
-- `WeightedRandomSampler`, `BatchSampler`) give the indices of an epoch;
-- `DataLoader(ds, opts)` cuts a dataset into batches, shuffled or not:
--
--     local loader = tide.data.DataLoader(tide.data.TensorDataset(x, y),
--                                         { batch_size = 64, shuffle = true, seed = 1 })
--     for epoch = 1, 10 do
--       for xb, yb in loader:iter() do ... end   -- or: for xb, yb in loader do ... end
--     end
--
-- A batch of a TensorDataset (or of a Subset or ConcatDataset of them) is
-- gathered by one `index_select` per tensor, whatever the sampler, which the
-- engine runs asynchronously; the loader enqueues the next batch's
-- gather before it hands out the current one, so that batch is computed while
-- the training step runs. Other datasets (any table or object with `get(i)` or
-- `[i]`, and `len()`, `__len` or `#`) are read item by item and collated:
-- tensors are stacked along a new first dimension, numbers become 1-d int64
-- tensors when all are integers and float64 ones otherwise (as PyTorch's
-- default_collate), booleans bool tensors; tables are collated key by key,
-- other values (strings) are returned as lists.
--
-- LuaJIT (Lua 5.1) ignores `__len` on tables, so datasets and loaders are
-- userdata proxies, which it honours: `#ds` and `#loader` work.
local B = require "bindings.ffi"
local T = require "tide.tensor"
local ffi, C = B.ffi, B.C
local fail = B.fail
local is_tensor = T.is_tensor
local floor = math.floor

local M = {}

-- `require "tide"` is in progress while init.lua loads this file: fetch it at first use.
local function tide() return require "tide" end

-- A userdata whose fields live in `state`, whose methods come from `class`,
-- and whose `#`, call, tostring and numeric indexing go to the class's `_len`,
-- `_call`, `_tostring` and `_at`.
local function object(state, class)
  local u = newproxy(true)
  local mt = getmetatable(u)
  setmetatable(state, { __index = class })
  mt.__index = class._at and function(_, k)
    if type(k) == "number" then return class._at(u, k) end
    return state[k]
  end or state
  mt.__newindex = state
  mt.__len = class._len
  mt.__call = class._call
  mt.__tostring = class._tostring
  mt.__metatable = class   -- getmetatable(obj) tells the class
  return u
end

local function pack(...) return { n = select("#", ...), ... } end

local function is_int(x) return type(x) == "number" and x == floor(x) end

-- -- TensorDataset ------------------------------------------------------------------------

local TensorDataset = {}
M.TensorDataset_class = TensorDataset

--- A dataset of tensors that share their first dimension: item i is row i of each.
-- `ds[i]` is the table { x[i], y[i], ... }, `ds:get(i)` returns them as values
-- (views, 1-based, negative counts from the end); `#ds` is the number of rows.
-- @param ... tensors with the same size of dimension 1
-- @usage local ds = tide.data.TensorDataset(images, labels); local x, y = ds:get(1)
function M.TensorDataset(...)
  local n = select("#", ...)
  if n == 0 then fail("TensorDataset: expects at least one tensor") end
  local tensors = { ... }
  for i = 1, n do
    local t = tensors[i]
    if not is_tensor(t) then fail(string.format("TensorDataset: argument %d must be a tensor, got %s", i, type(t))) end
    if t:dim() == 0 then fail(string.format("TensorDataset: tensor %d is 0-d; it needs a first dimension", i)) end
    if t:size(1) ~= tensors[1]:size(1) then
      fail(string.format("TensorDataset: tensor %d has %d rows but tensor 1 has %d", i, t:size(1), tensors[1]:size(1)))
    end
  end
  return object({ tensors = tensors, n = tensors[1]:size(1) }, TensorDataset)
end

function TensorDataset.len(ds) return ds.n end
TensorDataset._len = TensorDataset.len

--- The rows i of every tensor, as multiple values.
function TensorDataset.get(ds, i)
  local n = ds.n
  if not is_int(i) or i == 0 or i > n or i < -n then
    fail(string.format("TensorDataset: index %s is out of range for %d rows", tostring(i), n))
  end
  local ts, r = ds.tensors, {}
  for k = 1, #ts do r[k] = ts[k]:select(1, i) end
  return unpack(r, 1, #ts)
end

function TensorDataset._at(ds, i) return { TensorDataset.get(ds, i) } end

--- The rows listed by `index` (an int64 tensor of 1-based indices) of every
-- tensor: a list of new tensors, gathered by asynchronous index_select ops.
function TensorDataset.gather(ds, index)
  local r, on = {}, { [index:device()] = index }   -- the index, on each tensor's device
  for k, t in ipairs(ds.tensors) do
    local dev = t:device()
    on[dev] = on[dev] or index:to(dev)
    r[k] = t:index_select(1, on[dev])
  end
  r.n = #r
  return r
end

function TensorDataset._tostring(ds)
  local shapes = {}
  for k, t in ipairs(ds.tensors) do shapes[k] = "[" .. table.concat(t:shape(), ",") .. "] " .. t:dtype() end
  return string.format("TensorDataset(%d rows: %s)", ds.n, table.concat(shapes, ", "))
end

-- -- generic datasets -----------------------------------------------------------------------

-- ds[k] without letting an __index that raises on unknown keys (tensors do) escape.
local function field(ds, k)
  local ok, v = pcall(function() return ds[k] end)
  if ok then return v end
  return nil
end

-- ds's get method, or nil.
local function get_of(ds)
  local get = field(ds, "get")
  return type(get) == "function" and get or nil
end

-- The number of items: ds:len(), a metatable's __len (Lua 5.2 style), or #ds.
local function length_fn(ds)
  local len = field(ds, "len")
  if type(len) == "function" then return function() return len(ds) end end
  local mt = type(ds) == "table" and getmetatable(ds)
  if type(mt) == "table" and type(mt.__len) == "function" then return function() return mt.__len(ds) end end
  return function() return #ds end
end

-- A dataset argument of `who`: a tensor stands for the TensorDataset of its rows.
local function as_dataset(ds, who, what)
  if is_tensor(ds) then return M.TensorDataset(ds) end
  local t = type(ds)
  if t ~= "table" and t ~= "userdata" then
    fail(string.format("%s: %s must be a table or a dataset object, got %s", who, what or "dataset", t))
  end
  return ds
end

local function dataset_len(ds, who)
  local n = length_fn(ds)()
  if not is_int(n) or n < 0 then
    fail(string.format("%s: the dataset's length must be a non-negative integer, got %s", who, tostring(n)))
  end
  return n
end

-- i as a position in 1..n; negative i counts from the end.
local function position(who, i, n)
  if not is_int(i) or i == 0 or i > n or i < -n then
    fail(string.format("%s: index %s is out of range for %d items", who, tostring(i), n))
  end
  return i < 0 and n + 1 + i or i
end

-- A list of 1-based indices from a list or a 1-d integer tensor, each in 1..n
-- (n nil: any positive index).
local function index_list(x, who, what, n)
  local list = x
  if is_tensor(x) then
    if x:dim() ~= 1 or x:is_floating_point() or x:dtype() == "bool" then
      fail(string.format("%s: %s must be a 1-d integer tensor, got a %d-d %s tensor", who, what, x:dim(), x:dtype()))
    end
    list = x:totable()
  elseif type(x) ~= "table" then
    fail(string.format("%s: %s must be a list or a 1-d integer tensor of indices, got %s", who, what, type(x)))
  end
  local r = {}
  for k = 1, #list do
    local i = list[k]
    if not is_int(i) or i < 1 then
      fail(string.format("%s: %s[%d] must be a positive integer, got %s", who, what, k, tostring(i)))
    end
    if n and i > n then fail(string.format("%s: %s[%d] = %d is out of range for %d items", who, what, k, i, n)) end
    r[k] = i
  end
  return r
end

local function int64_tensor(list, device) return tide().tensor(list, { dtype = "int64", device = device }) end

-- -- Subset and ConcatDataset ------------------------------------------------------------------

local Subset, ConcatDataset = {}, {}
M.Subset_class, M.ConcatDataset_class = Subset, ConcatDataset

-- The batch gather of a dataset built here, and the number of values of its
-- items; nil for others. TensorDatasets gather, and so do Subsets and
-- ConcatDatasets of datasets that gather: a batch is then one index_select per
-- tensor (after a map of the indices), never a read item by item.
local function gather_of(ds)
  local mt = getmetatable(ds)
  if mt == TensorDataset then return TensorDataset.gather, #ds.tensors end
  if (mt == Subset or mt == ConcatDataset) and ds._width then return mt.gather, ds._width end
  return nil
end

--- The items of a dataset at some indices: item k is item `indices[k]` of `dataset`.
-- A Subset of a dataset that batches by gathers (TensorDataset, Subset,
-- ConcatDataset of those) batches by gathers too, with the indices mapped.
-- @param dataset any dataset (a tensor stands for its rows)
-- @param indices a list or a 1-d integer tensor of 1-based indices into dataset
-- @return a dataset: `#s`, `s:get(i)` (the item's values), `s[i]` (as `dataset[j]`), `s.indices` (a list)
-- @usage local head = tide.data.Subset(ds, { 1, 2, 3 })
function M.Subset(dataset, indices)
  dataset = as_dataset(dataset, "Subset")
  local list = index_list(indices, "Subset", "indices", dataset_len(dataset, "Subset"))
  local _, width = gather_of(dataset)
  return object({ dataset = dataset, indices = list, n = #list, _get = get_of(dataset), _width = width, _index = {} },
    Subset)
end

function Subset.len(s) return s.n end
Subset._len = Subset.len

function Subset.get(s, i)
  local j = s.indices[position("Subset", i, s.n)]
  if s._get then return s._get(s.dataset, j) end
  return s.dataset[j]
end

function Subset._at(s, i) return s.dataset[s.indices[position("Subset", i, s.n)]] end

--- The rows listed by `index` (an int64 tensor of 1-based indices): the
-- dataset's gather of the mapped indices, which one index_select maps.
function Subset.gather(s, index)
  local dev = index:device()
  s._index[dev] = s._index[dev] or int64_tensor(s.indices, dev)
  local parent = gather_of(s.dataset)
  return parent(s.dataset, s._index[dev]:index_select(1, index))
end

function Subset._tostring(s) return string.format("Subset(%d items of %s)", s.n, tostring(s.dataset)) end

--- Datasets one after the other: items 1..#ds1 are ds1's, then ds2's...
-- ConcatDatasets of datasets that gather, with the same number of values per
-- item, gather a batch from each dataset it touches and put the rows in order.
-- @param datasets a non-empty list of datasets (tensors stand for their rows)
-- @return a dataset: `#c`, `c:get(i)`, `c[i]`, `c.datasets`, `c.cumulative_sizes`
-- @usage local all = tide.data.ConcatDataset({ train, extra })
function M.ConcatDataset(datasets)
  if type(datasets) ~= "table" or getmetatable(datasets) ~= nil or #datasets == 0 then
    fail("ConcatDataset: expects a non-empty list of datasets, got "
      .. (type(datasets) == "table" and "an empty or non-list table" or type(datasets)))
  end
  local list, ends, gets, total, width = {}, {}, {}, 0, nil
  local gathers = true
  for k = 1, #datasets do
    local ds = as_dataset(datasets[k], "ConcatDataset", "dataset " .. k)
    total = total + dataset_len(ds, "ConcatDataset")
    list[k], ends[k], gets[k] = ds, total, get_of(ds) or false
    local _, w = gather_of(ds)
    if not w or (width and w ~= width) then gathers = false end
    width = width or w
  end
  return object({ datasets = list, cumulative_sizes = ends, n = total, _gets = gets, _width = gathers and width or nil },
    ConcatDataset)
end

function ConcatDataset.len(c) return c.n end
ConcatDataset._len = ConcatDataset.len

-- The dataset that holds item i (in 1..n) and the item's index there.
local function locate(c, i)
  local ends, lo, hi = c.cumulative_sizes, 1, #c.cumulative_sizes
  while lo < hi do   -- the first dataset whose end reaches i
    local mid = floor((lo + hi) / 2)
    if ends[mid] >= i then hi = mid else lo = mid + 1 end
  end
  return lo, i - (ends[lo - 1] or 0)
end

function ConcatDataset.get(c, i)
  local k, j = locate(c, position("ConcatDataset", i, c.n))
  local ds = c.datasets[k]
  if c._gets[k] then return c._gets[k](ds, j) end
  return ds[j]
end

function ConcatDataset._at(c, i)
  local k, j = locate(c, position("ConcatDataset", i, c.n))
  return c.datasets[k][j]
end

--- The rows listed by `index`: one gather from each dataset the batch touches
-- (the index is read back to split it); rows from several are concatenated
-- and put back in the batch's order by one more index_select per value.
function ConcatDataset.gather(c, index)
  local dev = index:device()
  local rows, places = {}, {}   -- per dataset: its rows in the batch, and their places
  for p, i in ipairs(index:totable()) do
    local k, j = locate(c, i)
    if not rows[k] then rows[k], places[k] = {}, {} end
    local r = rows[k]
    r[#r + 1], places[k][#r + 1] = j, p
  end
  local parts, order = {}, {}
  for k, ds in ipairs(c.datasets) do
    if rows[k] then
      parts[#parts + 1] = gather_of(ds)(ds, int64_tensor(rows[k], dev))
      for _, p in ipairs(places[k]) do order[#order + 1] = p end
    end
  end
  if #parts == 1 then return parts[1] end   -- the rows of one dataset keep the batch's order
  local inverse = {}   -- the place of each row of the batch in the concatenated parts
  for q, p in ipairs(order) do inverse[p] = q end
  local r, on = { n = c._width }, {}
  for v = 1, c._width do
    local cols = {}
    for q, part in ipairs(parts) do cols[q] = part[v] end
    local whole = tide().cat(cols, 1)
    local d = whole:device()
    on[d] = on[d] or int64_tensor(inverse, d)
    r[v] = whole:index_select(1, on[d])
  end
  return r
end

function ConcatDataset._tostring(c) return string.format("ConcatDataset(%d items of %d datasets)", c.n, #c.datasets) end

-- -- seeded draws ---------------------------------------------------------------------------

local state_seed, state_offset = ffi.new("uint64_t[1]"), ffi.new("uint64_t[1]")

local function check_seed(who, seed)
  if seed ~= nil and (not is_int(seed) or seed < 0 or seed >= 2 ^ 53) then
    fail(string.format("%s: seed must be a non-negative integer, got %s", who, tostring(seed)))
  end
  return seed
end

-- fn(...) drawing from Philox stream `seed` at counter offset epoch * 2^40,
-- the global generator's state restored afterwards; without a seed, fn(...)
-- draws from the global generator (tide.manual_seed).
local function drawn(seed, epoch, fn, ...)
  if seed == nil then return fn(...) end
  C.tide_rng_get_state(state_seed, state_offset)
  local saved_seed, saved_offset = state_seed[0], state_offset[0]
  C.tide_rng_set_state(seed, ffi.cast("uint64_t", epoch) * 1099511627776ULL)   -- epoch * 2^40
  local r = pack(pcall(fn, ...))
  C.tide_rng_set_state(saved_seed, saved_offset)
  if not r[1] then error(r[2], 0) end
  return unpack(r, 2, r.n)
end

local function check_opts(who, opts, known)
  opts = opts or {}
  if type(opts) ~= "table" then fail(string.format("%s: options must be a table, got %s", who, type(opts))) end
  for k in pairs(opts) do
    if not known[k] then fail(string.format("%s: unknown option '%s'", who, tostring(k))) end
  end
  return opts
end

local function check_flag(who, opts, k, default)
  local v = opts[k]
  if v ~= nil and type(v) ~= "boolean" then fail(string.format("%s: %s must be a boolean, got %s", who, k, type(v))) end
  if v == nil then return default end
  return v
end

--- Splits a dataset into random Subsets that do not overlap.
-- @param lengths the sizes, as counts that sum to #dataset or as fractions that
--   sum to 1: fraction f gets floor(f * #dataset) items, and the items left over
--   go one each to the first, second... subsets in turn (PyTorch's rounding)
-- @param opts `seed`: draw the permutation from Philox stream `seed`, leaving the
--   global generator alone; without it, from the global generator
-- @return the Subsets, one per length, as multiple values
-- @usage local train, val = tide.data.random_split(ds, { 0.8, 0.2 }, { seed = 1 })
function M.random_split(dataset, lengths, opts)
  dataset = as_dataset(dataset, "random_split")
  opts = check_opts("random_split", opts, { seed = true })
  local seed = check_seed("random_split", opts.seed)
  if type(lengths) ~= "table" or #lengths == 0 then fail("random_split: lengths must be a non-empty list of numbers") end
  local n, sum = dataset_len(dataset, "random_split"), 0
  for k, l in ipairs(lengths) do
    if type(l) ~= "number" or l ~= l or l < 0 or l == math.huge then
      fail(string.format("random_split: lengths[%d] must be a non-negative number, got %s", k, tostring(l)))
    end
    sum = sum + l
  end
  local counts = {}
  if math.abs(sum - 1) <= 1e-9 and sum <= n then   -- fractions, as PyTorch tells them
    local left = n
    for k, f in ipairs(lengths) do   -- each in [0, 1]: none is negative and they sum to 1
      counts[k] = floor(n * f)
      left = left - counts[k]
    end
    for i = 0, left - 1 do
      local k = i % #lengths + 1
      counts[k] = counts[k] + 1
    end
  else
    for k, l in ipairs(lengths) do
      if not is_int(l) then
        fail(string.format("random_split: lengths[%d] = %s is neither a count nor a fraction", k, tostring(l)))
      end
      counts[k] = l
    end
    if sum ~= n then
      fail(string.format("random_split: the lengths sum to %s but the dataset has %d items", tostring(sum), n))
    end
  end
  local perm = n > 0 and drawn(seed, 0, tide().randperm, n):totable() or {}
  local r, at = {}, 0
  for k, c in ipairs(counts) do
    local indices = {}
    for j = 1, c do indices[j] = perm[at + j] end
    r[k] = M.Subset(dataset, indices)
    at = at + c
  end
  return unpack(r, 1, #counts)
end

-- -- samplers ---------------------------------------------------------------------------------
-- A sampler gives the dataset indices of an epoch: `s:iter()` an iterator over
-- them, `#s` or `s:len()` their number. The samplers here also have
-- `s:order()`, the indices as an int64 tensor, which a DataLoader cuts into
-- batches without reading them back. Each iter() or order() call is a new epoch,
-- counted from 0 (or set with set_epoch); with a seed, epoch e draws from Philox
-- stream `seed` at counter offset e * 2^40 as DataLoader's shuffle does, and
-- without one from the global generator.

local Sampler = {}   -- what the samplers share

local function sampler_class(name)
  local class = setmetatable({ _name = name }, { __index = Sampler })
  M[name .. "_class"] = class
  return class
end

function Sampler._len(s) return s:len() end

--- The indices of the next epoch, as an int64 tensor.
function Sampler.order(s)
  local e = s.epoch
  s.epoch = e + 1
  return drawn(s.seed, e, s._draw, s)
end

--- An iterator over the indices of the next epoch.
function Sampler.iter(s)
  local list, k = s:order():totable(), 0
  return function()
    k = k + 1
    return list[k]
  end
end

--- Sets the number of the next epoch (for the seeded draws when resuming).
function Sampler.set_epoch(s, e)
  if not is_int(e) or e < 0 then fail("set_epoch: epoch must be a non-negative integer, got " .. tostring(e)) end
  s.epoch = e
end

function Sampler._tostring(s)
  return string.format("%s(%d indices%s)", s._name, s:len(), s.seed and (", seed " .. s.seed) or "")
end

local function new_sampler(class, state)
  state.epoch = 0
  return object(state, class)
end

local function empty_index() return tide().zeros({ 0 }, { dtype = "int64" }) end

local SequentialSampler = sampler_class("SequentialSampler")

--- The indices 1..#dataset in order.
-- @usage tide.data.DataLoader(ds, { sampler = tide.data.SequentialSampler(ds) })
function M.SequentialSampler(dataset)
  dataset = as_dataset(dataset, "SequentialSampler")
  return new_sampler(SequentialSampler, { data_source = dataset })
end

function SequentialSampler.len(s) return dataset_len(s.data_source, "SequentialSampler") end
SequentialSampler._range = SequentialSampler.len
function SequentialSampler._draw(s)
  local n = s:len()
  return n > 0 and tide().arange(1, n + 1) or empty_index()
end

local RandomSampler = sampler_class("RandomSampler")

--- Random indices of a dataset: a new permutation each epoch, or with
-- `replacement` independent uniform draws.
-- @param opts `replacement` (default false); `num_samples` (default #dataset;
--   without replacement, more than #dataset chains permutations); `seed`
-- @usage tide.data.RandomSampler(ds, { replacement = true, num_samples = 1000, seed = 1 })
function M.RandomSampler(dataset, opts)
  dataset = as_dataset(dataset, "RandomSampler")
  opts = check_opts("RandomSampler", opts, { replacement = true, num_samples = true, seed = true })
  local m = opts.num_samples
  if m ~= nil and (not is_int(m) or m < 1) then
    fail("RandomSampler: num_samples must be a positive integer, got " .. tostring(m))
  end
  return new_sampler(RandomSampler, {
    data_source = dataset, replacement = check_flag("RandomSampler", opts, "replacement", false),
    num_samples = m, seed = check_seed("RandomSampler", opts.seed),
  })
end

function RandomSampler._range(s) return dataset_len(s.data_source, "RandomSampler") end
function RandomSampler.len(s) return s.num_samples or s:_range() end
function RandomSampler._draw(s)
  local n, m = s:_range(), s:len()
  if m == 0 then return empty_index() end
  if n == 0 then fail(string.format("RandomSampler: cannot draw %d indices from an empty dataset", m)) end
  if s.replacement then return tide().randint(1, n + 1, { m }) end
  local perms = {}
  for k = 1, floor(m / n) do perms[k] = tide().randperm(n) end
  if m % n > 0 then perms[#perms + 1] = tide().randperm(n):narrow(1, 1, m % n) end
  return #perms == 1 and perms[1] or tide().cat(perms, 1)
end

local SubsetRandomSampler = sampler_class("SubsetRandomSampler")

--- The given indices in a new random order each epoch.
-- @param indices a list or a 1-d integer tensor of 1-based indices
-- @param opts `seed`
-- @usage tide.data.SubsetRandomSampler({ 2, 4, 6 }, { seed = 1 })
function M.SubsetRandomSampler(indices, opts)
  local list = index_list(indices, "SubsetRandomSampler", "indices")
  opts = check_opts("SubsetRandomSampler", opts, { seed = true })
  local range = 0
  for _, i in ipairs(list) do range = math.max(range, i) end
  return new_sampler(SubsetRandomSampler, {
    indices = list, seed = check_seed("SubsetRandomSampler", opts.seed), _range_n = range,
    _index = #list > 0 and int64_tensor(list) or empty_index(),
  })
end

function SubsetRandomSampler.len(s) return #s.indices end
function SubsetRandomSampler._range(s) return s._range_n end
function SubsetRandomSampler._draw(s)
  if #s.indices == 0 then return s._index end
  return s._index:index_select(1, tide().randperm(#s.indices))
end

local WeightedRandomSampler = sampler_class("WeightedRandomSampler")

--- Indices 1..#weights drawn with probability proportional to their weight.
-- With replacement each index is an inverse-CDF draw: a uniform draw on
-- [0, sum of the weights) finds its place among the cumulative weights (one
-- stable sort of both). Without replacement the num_samples largest of
-- log(w) + Gumbel noise are taken (Gumbel top-k), which draws as one weighted
-- draw after another, each leaving out what was drawn. Zero weights are never drawn.
-- @param weights a list or a 1-d tensor of non-negative finite numbers, not all zero
-- @param num_samples the number of indices of an epoch
-- @param opts `replacement` (default true); `seed`
-- @usage tide.data.WeightedRandomSampler({ 0.1, 0.9 }, 100, { seed = 1 })
function M.WeightedRandomSampler(weights, num_samples, opts)
  local who = "WeightedRandomSampler"
  local list = weights
  if is_tensor(weights) then
    if weights:dim() ~= 1 then fail(string.format("%s: weights must be a 1-d tensor, got %d-d", who, weights:dim())) end
    list = weights:totable()
  elseif type(weights) ~= "table" then
    fail(string.format("%s: weights must be a list or a 1-d tensor of numbers, got %s", who, type(weights)))
  end
  if not is_int(num_samples) or num_samples < 1 then
    fail(string.format("%s: num_samples must be a positive integer, got %s", who, tostring(num_samples)))
  end
  opts = check_opts(who, opts, { replacement = true, seed = true })
  local replacement = check_flag(who, opts, "replacement", true)
  local pos, cdf, logw, total = {}, {}, {}, 0
  for k = 1, #list do
    local w = list[k]
    if type(w) ~= "number" or not (w >= 0 and w < math.huge) then
      fail(string.format("%s: weights[%d] must be a non-negative finite number, got %s", who, k, tostring(w)))
    end
    if w > 0 then
      total = total + w
      pos[#pos + 1], cdf[#cdf + 1], logw[#logw + 1] = k, total, math.log(w)
    end
  end
  if #pos == 0 then fail(string.format("%s: the %d weights are all zero", who, #list)) end
  if not replacement and num_samples > #pos then
    fail(string.format("%s: cannot draw %d samples without replacement from %d positive weights", who, num_samples, #pos))
  end
  return new_sampler(WeightedRandomSampler, {
    weights = list, num_samples = num_samples, replacement = replacement, seed = check_seed(who, opts.seed),
    _n = #list, _total = total, _pos = int64_tensor(pos), _cdf = tide().tensor(cdf, "float64"),
    _logw = tide().tensor(logw, "float64"),
  })
end

function WeightedRandomSampler.len(s) return s.num_samples end
function WeightedRandomSampler._range(s) return s._n end
function WeightedRandomSampler._draw(s)
  local k, m = s._cdf:size(1), s.num_samples
  if s.replacement then
    local u = tide().rand({ m }, { dtype = "float64" }) * s._total
    -- in the stable sort a cumulative weight goes before a draw equal to it:
    -- the bounds before a draw u are those <= u, and u picks the next one
    local _, place = tide().cat({ s._cdf, u }, 1):sort(1)
    local bounds = place:le(k):cumsum(1)
    local pick = tide().zeros({ k + m }, { dtype = "int64" }):scatter(1, place, bounds + 1)
    return s._pos:index_select(1, pick:narrow(1, k + 1, m):clamp(1, k))   -- u rounded up to the total picks the last
  end
  local gumbel = -(-tide().rand({ k }, { dtype = "float64" }):log()):log()
  local _, top = (s._logw + gumbel):topk(m)
  return s._pos:index_select(1, top)
end

-- A sampler argument of `who`: the samplers here, a list or a 1-d integer
-- tensor of indices, or an object with iter() (and len() for #loader). Its
-- functions: iter(), and where known len(), order(), range() (the largest
-- index it gives) and set_epoch(e).
local function as_sampler(x, who, what)
  local mt = getmetatable(x)
  if type(mt) == "table" and rawget(mt, "_draw") then
    return {
      iter = function() return x:iter() end, len = function() return x:len() end,
      order = function() return x:order() end, range = function() return x:_range() end,
      set_epoch = function(e) x:set_epoch(e) end,
    }
  end
  if is_tensor(x) or (type(x) == "table" and field(x, "iter") == nil) then
    local list = index_list(x, who, what)
    local range, index = 0, nil
    for _, i in ipairs(list) do range = math.max(range, i) end
    return {
      iter = function()
        local k = 0
        return function() k = k + 1 return list[k] end
      end,
      len = function() return #list end, range = function() return range end,
      order = function()
        index = index or (#list > 0 and int64_tensor(list) or empty_index())
        return index
      end,
    }
  end
  local iter = field(x, "iter")
  if type(iter) ~= "function" then
    fail(string.format("%s: %s must be a list or a 1-d integer tensor of indices, or an object with iter(), got %s",
      who, what, type(x)))
  end
  local len, set_epoch = field(x, "len"), field(x, "set_epoch")
  return {
    iter = function() return iter(x) end,
    len = type(len) == "function" and function() return len(x) end or nil,
    set_epoch = type(set_epoch) == "function" and function(e) set_epoch(x, e) end or nil,
  }
end

local BatchSampler = {}
M.BatchSampler_class = BatchSampler

--- Groups the indices of a sampler into batches: lists of batch_size indices,
-- the last one smaller unless drop_last leaves it out.
-- @param sampler a sampler, a list or 1-d integer tensor of indices, or an object with iter()
-- @usage for b in tide.data.BatchSampler(tide.data.SequentialSampler(ds), 32, false):iter() do ... end
function M.BatchSampler(sampler, batch_size, drop_last)
  local src = as_sampler(sampler, "BatchSampler", "sampler")
  if not is_int(batch_size) or batch_size < 1 then
    fail("BatchSampler: batch_size must be a positive integer, got " .. tostring(batch_size))
  end
  if drop_last ~= nil and type(drop_last) ~= "boolean" then
    fail("BatchSampler: drop_last must be a boolean, got " .. type(drop_last))
  end
  return object({ sampler = sampler, batch_size = batch_size, drop_last = drop_last == true, _src = src }, BatchSampler)
end

function BatchSampler.len(s)
  if not s._src.len then fail("BatchSampler: the sampler has no len()") end
  local m = s._src.len()
  return s.drop_last and floor(m / s.batch_size) or math.ceil(m / s.batch_size)
end
BatchSampler._len = BatchSampler.len

--- An iterator over the batches of the next epoch, each a list of indices.
function BatchSampler.iter(s)
  local it, bs, done = s._src.iter(), s.batch_size, false
  return function()
    if done then return nil end
    local b = {}
    for k = 1, bs do
      local i = it()
      if i == nil then done = true break end
      b[k] = i
    end
    if #b == 0 or (#b < bs and s.drop_last) then return nil end
    return b
  end
end

function BatchSampler.set_epoch(s, e)
  if s._src.set_epoch then s._src.set_epoch(e) end
end

function BatchSampler._tostring(s)
  return string.format("BatchSampler(batch_size %d%s)", s.batch_size, s.drop_last and ", drop_last" or "")
end

-- A batch_sampler argument of DataLoader: iter() (batches as lists or 1-d
-- integer tensors), len() where known, set_epoch(e); for a BatchSampler of a
-- sampler with order(), that sampler (`inner`), batch_size and drop_last.
local function as_batch_sampler(x)
  if getmetatable(x) == BatchSampler then
    return {
      iter = function() return x:iter() end, len = function() return x:len() end,
      set_epoch = function(e) x:set_epoch(e) end,
      inner = x._src.order and x._src or nil, batch_size = x.batch_size, drop_last = x.drop_last,
    }
  end
  if type(x) == "table" and field(x, "iter") == nil then   -- a list of batches
    return {
      iter = function()
        local k = 0
        return function() k = k + 1 return x[k] end
      end,
      len = function() return #x end,
    }
  end
  local iter = field(x, "iter")
  if type(iter) ~= "function" then
    fail("DataLoader: batch_sampler must be a list of batches or an object with iter(), got " .. type(x))
  end
  local len, set_epoch = field(x, "len"), field(x, "set_epoch")
  return {
    iter = function() return iter(x) end,
    len = type(len) == "function" and function() return len(x) end or nil,
    set_epoch = type(set_epoch) == "function" and function(e) set_epoch(x, e) end or nil,
  }
end

-- -- collation ----------------------------------------------------------------------------------

local collate

-- The values of one position across the samples of a batch, as one batch value.
local function collate_values(values, what)
  local first = values[1]
  local kind = is_tensor(first) and "tensor" or type(first)
  for i = 2, #values do
    local v = values[i]
    local k = is_tensor(v) and "tensor" or type(v)
    if k ~= kind then
      fail(string.format("DataLoader: %s is a %s in sample 1 but a %s in sample %d of the batch", what, kind, k, i))
    end
  end
  if kind == "tensor" then return tide().stack(values, 1) end
  if kind == "number" then
    local ints = true
    for i = 1, #values do if not is_int(values[i]) or math.abs(values[i]) >= 2 ^ 53 then ints = false; break end end
    return tide().tensor(values, ints and "int64" or "float64")   -- as PyTorch's default_collate
  end
  if kind == "boolean" then return tide().tensor(values, "bool") end
  if kind == "table" then return collate(values, what) end
  return values
end

-- Tables collate key by key.
function collate(samples, what)
  local r = {}
  for k in pairs(samples[1]) do
    local col = {}
    for i, s in ipairs(samples) do
      if s[k] == nil then
        fail(string.format("DataLoader: key %s of %s is missing in sample %d of the batch", tostring(k), what, i))
      end
      col[i] = s[k]
    end
    r[k] = collate_values(col, string.format("%s[%s]", what, tostring(k)))
  end
  return r
end

-- -- DataLoader --------------------------------------------------------------------------------

local DataLoader = {}
M.DataLoader_class = DataLoader

--- Batches of a dataset.
-- @param dataset a TensorDataset, a tensor (its rows), or any dataset with get(i) or [i] and a length
-- @param opts `batch_size` (default 1); `shuffle` (default false): a new random
--   order each epoch; `drop_last` (default false): leave out a last, smaller
--   batch; `seed`: shuffle reproducibly, independently of the global generator:
--   epoch e (counted by iter() calls from 0, or set with set_epoch) draws its
--   permutation with tide.randperm from Philox stream `seed` at counter offset
--   e * 2^40, and the global generator's state is restored afterwards. Without
--   a seed, shuffling draws from the global generator (tide.manual_seed).
--   `sampler`: the indices of an epoch instead of shuffle's (a sampler, a list
--   or 1-d integer tensor of indices, or an object with iter() and len());
--   `batch_sampler`: the batches of an epoch instead (lists or tensors of
--   indices), which excludes batch_size, shuffle, sampler and drop_last;
--   `collate_fn`: a function given the list of the items of a batch (an item is
--   the value get(i) or [i] returns, or a table of the values when get returns
--   several), whose results are the batch's values. Datasets that gather
--   (TensorDataset, and Subsets and ConcatDatasets of them) gather a batch by
--   one index_select per tensor with any sampler, but are read item by item
--   for a collate_fn.
-- @return a loader: `#loader` is the number of batches; `loader:iter()` returns an
--   iterator over the batches of the next epoch, each batch as multiple values
--   (one per tensor of a TensorDataset); `for xb, yb in loader do` does the same.
-- @usage for xb, yb in tide.data.DataLoader(ds, { batch_size = 32, shuffle = true }):iter() do ... end
function M.DataLoader(dataset, opts)
  opts = check_opts("DataLoader", opts, {
    batch_size = true, shuffle = true, drop_last = true, seed = true, sampler = true, batch_sampler = true,
    collate_fn = true,
  })
  dataset = as_dataset(dataset, "DataLoader")
  local bs = opts.batch_size or 1
  if not is_int(bs) or bs < 1 then fail("DataLoader: batch_size must be a positive integer, got " .. tostring(bs)) end
  local seed = check_seed("DataLoader", opts.seed)
  local shuffle = check_flag("DataLoader", opts, "shuffle", false)
  local drop_last = check_flag("DataLoader", opts, "drop_last", false)
  local collate_fn = opts.collate_fn
  if collate_fn ~= nil and type(collate_fn) ~= "function" then
    fail("DataLoader: collate_fn must be a function, got " .. type(collate_fn))
  end
  local sampler, batch_sampler
  if opts.batch_sampler ~= nil then   -- it decides what these would (PyTorch's rule; batch_size 1 is the default)
    for _, k in ipairs { "batch_size", "shuffle", "sampler", "drop_last" } do
      local v = opts[k]
      if v ~= nil and v ~= false and not (k == "batch_size" and v == 1) then
        fail("DataLoader: batch_sampler and " .. k .. " are mutually exclusive")
      end
    end
    batch_sampler = as_batch_sampler(opts.batch_sampler)
  end
  if opts.sampler ~= nil then
    if shuffle then fail("DataLoader: sampler and shuffle are mutually exclusive") end
    sampler = as_sampler(opts.sampler, "DataLoader", "sampler")
  end
  if seed ~= nil and (sampler or batch_sampler) then   -- it would be ignored: the sampler draws
    fail(string.format("DataLoader: seed and %s are mutually exclusive (seed the sampler)",
      sampler and "sampler" or "batch_sampler"))
  end
  return object({
    dataset = dataset, batch_size = bs, shuffle = shuffle, drop_last = drop_last, seed = seed, epoch = 0,
    sampler = opts.sampler, batch_sampler = opts.batch_sampler, collate_fn = collate_fn,
    _sampler = sampler, _batch_sampler = batch_sampler,
    _length = length_fn(dataset), _gather = not collate_fn and gather_of(dataset) or nil, _get = get_of(dataset),
  }, DataLoader)
end

--- The number of items in the dataset.
function DataLoader.dataset_len(self)
  local n = self._length()
  if not is_int(n) or n < 0 then fail("DataLoader: the dataset's length must be a non-negative integer, got " .. tostring(n)) end
  return n
end

-- A len() of a sampler, checked.
local function sampler_len(s, what)
  if not s.len then fail(string.format("DataLoader: the %s has no len()", what)) end
  local n = s.len()
  if not is_int(n) or n < 0 then
    fail(string.format("DataLoader: the %s's length must be a non-negative integer, got %s", what, tostring(n)))
  end
  return n
end

--- The number of batches of an epoch (also `#loader`).
function DataLoader.len(self)
  if self._batch_sampler then return sampler_len(self._batch_sampler, "batch_sampler") end
  local n = self._sampler and sampler_len(self._sampler, "sampler") or self:dataset_len()
  local bs = self.batch_size
  if self.drop_last then return floor(n / bs) end
  return math.ceil(n / bs)
end
DataLoader._len = DataLoader.len

--- Sets the number of the next epoch (for the seeded order when resuming), and
-- the sampler's where it has set_epoch.
function DataLoader.set_epoch(self, e)
  if not is_int(e) or e < 0 then fail("set_epoch: epoch must be a non-negative integer, got " .. tostring(e)) end
  self.epoch = e
  local s = self._batch_sampler or self._sampler
  if s and s.set_epoch then s.set_epoch(e) end
end

-- The order of an epoch: nil (sequential) or a permutation tensor of 1..n.
local function epoch_order(self, epoch, n)
  if not self.shuffle then return nil end
  return drawn(self.seed, epoch, tide().randperm, n)
end

-- The indices of a batch that came from a user's sampler, checked: a list.
local function checked_batch(b, n, what)
  if not is_tensor(b) and type(b) ~= "table" then
    fail(string.format("DataLoader: the %s gave a %s, not a list or a 1-d integer tensor of indices", what, type(b)))
  end
  return index_list(b, "DataLoader", "the " .. what .. "'s batch", n)
end

-- The batches of an epoch: a function that returns the next batch's indices
-- (an int64 tensor for a dataset that gathers, a list otherwise), nil after the last.
local function batches(self, epoch, n)
  local source, bs, drop = self._sampler, self.batch_size, self.drop_last
  local bsampler = self._batch_sampler
  if bsampler and not bsampler.inner then   -- a user's batches, as they come
    local it, done = bsampler.iter(), false
    return function()
      if done then return nil end
      local b = it()
      if b == nil then done = true return nil end
      b = checked_batch(b, n, "batch_sampler")
      return self._gather and int64_tensor(b) or b
    end
  end
  if bsampler then source, bs, drop = bsampler.inner, bsampler.batch_size, bsampler.drop_last end
  if source and not source.order then   -- a user's sampler: batch_size indices at a time
    local it, done = source.iter(), false
    return function()
      if done then return nil end
      local b = {}
      for k = 1, bs do
        local i = it()
        if i == nil then done = true break end
        b[k] = i
      end
      if #b == 0 or (#b < bs and drop) then done = true return nil end
      b = checked_batch(b, n, "sampler")
      return self._gather and int64_tensor(b) or b
    end
  end
  local order, m = nil, n   -- order nil: 1..n in turn
  if source then
    local range = source.range()
    if range > n then
      fail(string.format("DataLoader: the sampler gives indices up to %d but the dataset has %d items", range, n))
    end
    order = source.order()
    m = order:size(1)
  else
    order = epoch_order(self, epoch, n)
  end
  local nb = drop and floor(m / bs) or math.ceil(m / bs)
  local list = order and not self._gather and order:totable() or nil
  local b = 0
  return function()
    if b >= nb then return nil end
    b = b + 1
    local first = (b - 1) * bs + 1
    local len = math.min(bs, m - first + 1)
    if self._gather then return order and order:narrow(1, first, len) or tide().arange(first, first + len) end
    local r = {}
    for k = 1, len do r[k] = list and list[first + k - 1] or first + k - 1 end
    return r
  end
end

-- Starts the work of a batch (nil: none) given its indices: for a dataset that
-- gathers, enqueues its gathers; otherwise reads its items and collates them.
-- Returns the batch values (with .n).
local function fetch(self, indices)
  if indices == nil then return nil end
  if self._gather then return self._gather(self.dataset, indices) end
  local ds, get = self.dataset, self._get
  local samples, width = {}, nil
  for k, i in ipairs(indices) do
    local s
    if get then s = pack(get(ds, i)) else s = pack(ds[i]) end
    if s.n == 0 or s[1] == nil then fail(string.format("DataLoader: the dataset returned nothing for item %d", i)) end
    for pos = 2, s.n do
      if s[pos] == nil then fail(string.format("DataLoader: value %d of item %d is nil", pos, i)) end
    end
    if width and s.n ~= width and not self.collate_fn then
      fail(string.format("DataLoader: item %d has %d values but item %d has %d", i, s.n, samples[1].i, width))
    end
    width = width or s.n
    s.i = i
    samples[k] = s
  end
  if self.collate_fn then
    local items = {}
    for k, s in ipairs(samples) do items[k] = s.n == 1 and s[1] or { unpack(s, 1, s.n) } end
    local r = pack(self.collate_fn(items))
    if r.n == 0 or r[1] == nil then fail("DataLoader: collate_fn returned nothing for a batch") end
    return r
  end
  if #samples == 0 then fail("DataLoader: a batch has no items") end
  local r = { n = width }
  for pos = 1, width do
    local values = {}
    for k = 1, #samples do values[k] = samples[k][pos] end
    r[pos] = collate_values(values, "value " .. pos)
  end
  return r
end

--- An iterator over the batches of the next epoch; each call returns a batch as
-- multiple values, nil after the last. The next batch's work is started before
-- the current batch is returned.
-- @usage for xb, yb in loader:iter() do ... end
function DataLoader.iter(self)
  local n = self:dataset_len()
  local epoch = self.epoch
  self.epoch = epoch + 1
  local next_batch = batches(self, epoch, n)
  local ahead = fetch(self, next_batch())
  return function()
    local batch = ahead
    if batch == nil then return nil end
    ahead = fetch(self, next_batch())   -- prefetch before handing out
    return unpack(batch, 1, batch.n)
  end
end

-- `for xb, yb in loader do`: Lua calls loader(nil, control); control is nil on
-- the first call of a loop, which starts a new epoch.
function DataLoader._call(self, _, control)
  if control == nil or self._it == nil then self._it = self:iter() end
  local r = { self._it() }
  if r[1] == nil then self._it = nil end
  return unpack(r)
end

function DataLoader._tostring(self)
  local ok, nb = pcall(DataLoader.len, self)
  return string.format("DataLoader(%d items, batch_size %d, %s batches%s%s%s)", self:dataset_len(), self.batch_size,
    ok and tostring(nb) or "?", self.shuffle and ", shuffle" or "", self.drop_last and ", drop_last" or "",
    self.seed and (", seed " .. self.seed) or "")
end

return M
